"""Fail-fast gathering of Ray results: one failing task surfaces at once instead of after a slow peer."""

import time

import pytest
import ray

from evr1.cluster.connect import ensure_ray
from evr1.train.actor_group import gather


@ray.remote(num_cpus=0)
def _slow():
    time.sleep(60)
    return "slow"


@ray.remote(num_cpus=0)
def _boom():
    raise ValueError("rank 1 failed")


def test_the_first_failure_is_raised_without_waiting_for_the_rest():
    ensure_ray(None, num_cpus=2)
    slow = _slow.remote()
    with pytest.raises(ValueError, match="rank 1 failed"):
        gather([slow, _boom.remote()])
    # The slow peer is still running: the failure was raised without waiting for it.
    ready, _ = ray.wait([slow], timeout=0)
    ray.cancel(slow, force=True)
    assert not ready
