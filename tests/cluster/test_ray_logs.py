"""Ray worker log lines (warnings and errors) reach a Python logger, with the worker named."""

import logging
import time

import ray

from evr1.cluster.logs import forwarded, level_of


def test_levels_are_read_from_the_line():
    assert level_of("2026-01-01 WARNING something") == logging.WARNING
    assert level_of("ValueError: bad") == logging.ERROR
    assert level_of("plain progress") == logging.INFO


def test_worker_warnings_and_errors_are_forwarded(caplog):
    if not ray.is_initialized():
        ray.init(num_cpus=1, include_dashboard=False, log_to_driver=True)

    @ray.remote
    def noisy() -> int:
        print("WARNING evr1-forward-check: disk almost full", flush=True)
        print("ERROR evr1-forward-check: a sample failed", flush=True)
        print("evr1-forward-check: an ordinary line", flush=True)
        return 1

    logger = logging.getLogger("evr1.test.ray")
    with caplog.at_level(logging.INFO, logger="evr1.test.ray"), forwarded(logger):
        assert ray.get(noisy.remote()) == 1
        deadline = time.monotonic() + 60  # lines travel through Ray's log monitor: wait for them
        while time.monotonic() < deadline and sum("evr1-forward-check" in r.message for r in caplog.records) < 2:
            time.sleep(0.2)
    got = {(r.levelno, r.message.split(") ", 1)[-1]) for r in caplog.records if "evr1-forward-check" in r.message}
    assert (logging.WARNING, "WARNING evr1-forward-check: disk almost full") in got
    assert (logging.ERROR, "ERROR evr1-forward-check: a sample failed") in got
    assert not any("ordinary" in m for _, m in got)
    assert all("noisy" in r.message for r in caplog.records if "evr1-forward-check" in r.message)
