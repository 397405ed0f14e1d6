"""The rollout engine's side of a sync (`RolloutWorker.load_weights`), on a real tiny HF engine:
a complete stream loads in place and names the version; one that misses a weight the engine holds is
an error naming it, never a silently stale layer; the separate worker's buckets load the same."""

from __future__ import annotations

import pytest
import torch

from evr1.models import make_tiny
from evr1.train.weight_sync import SyncIncomplete, pack_buckets, sync_names, unpack
from evr1.train.workers.rollout import RolloutWorker


@pytest.fixture(scope="module")
def worker(tmp_path_factory):
    model_dir = make_tiny("qwen2_5_vl", tmp_path_factory.mktemp("lifecycle") / "m", seed=3)
    return RolloutWorker(str(model_dir), "hf", {"batch_size": 2, "dtype": "float32", "device": "cpu", "threads": 0})


def _perturbed(worker: RolloutWorker, scale: float) -> dict[str, torch.Tensor]:
    model = worker.engine.model
    state = model.state_dict()
    return {name: state[name] + scale if state[name].is_floating_point() else state[name].clone()
            for name in sync_names(model)}


def test_a_complete_stream_loads_in_place_and_names_its_version(worker):
    new = _perturbed(worker, 0.5)
    report = worker.load_weights(iter(new.items()), version=3)
    assert worker.version == 3 and worker.events[-1] == "load"
    assert report["tensors"] == len(new) and report["bytes"] == sum(t.numel() * t.element_size() for t in new.values())
    held = worker.engine.model.state_dict()
    assert all(torch.equal(held[name], value) for name, value in new.items())


def test_a_stream_that_misses_a_weight_is_an_error_naming_it(worker):
    new = _perturbed(worker, 0.25)
    missing = "model.language_model.layers.0.mlp.down_proj.weight"
    assert missing in new
    del new[missing]
    with pytest.raises(SyncIncomplete, match=r"1 missing \(model\.language_model\.layers\.0\.mlp\.down_proj\.weight\)"):
        worker.load_weights(iter(new.items()), version=4)
    assert worker.version != 4


def test_buckets_round_trip_into_the_engine(worker):
    """The separate placement's path: packed into small buckets (several per sync), unpacked, loaded."""
    new = _perturbed(worker, -0.125)
    buckets = list(pack_buckets(iter(new.items()), 64 * 1024))
    assert len(buckets) > 1
    worker.load_weights((item for b in buckets for item in unpack(b)), version=5)
    held = worker.engine.model.state_dict()
    assert all(torch.equal(held[name], value) for name, value in new.items())
