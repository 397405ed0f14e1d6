"""Test-wide settings: offline, quiet, and one Ray instance per session (each init costs seconds); which
tests must run one at a time (`serial`)."""

import os
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")

import pytest  # noqa: E402

TESTS = Path(__file__).resolve().parent
# Tests that start Ray, servers, actors or whole `evr1` runs, or time how quickly something starts or
# stops: they need the machine's cores to themselves (a training's two ranks and its rollout worker keep
# both of CI's cores busy) and some share state a second run would race (Ray's session directory,
# Prefect's home database). `make test` runs everything else on two xdist workers first, then these
# one at a time (`-m serial`); a plain `pytest tests` runs all of them in one process, as before.
SERIAL_DIRS = {"benchmarks", "cli", "cluster", "e2e", "train", "vllm"}
SERIAL_FILES = {
    "cache/test_ray_build.py",  # Ray cache builds
    "config/test_preflight.py",  # Ray cluster checks
    "engines/test_remote.py",  # engines in Ray actors
    "eval/test_evaluate.py",  # evaluation on Ray
}


def pytest_collection_modifyitems(config, items):
    """Mark the tests under SERIAL_DIRS and in SERIAL_FILES `serial`."""
    for item in items:
        try:
            rel = item.path.resolve().relative_to(TESTS)
        except ValueError:  # a test outside tests/
            continue
        if rel.parts[0] in SERIAL_DIRS or rel.as_posix() in SERIAL_FILES:
            item.add_marker(pytest.mark.serial)


@pytest.fixture(scope="session", autouse=True)
def _ray_shutdown_at_end():
    yield
    import ray

    if ray.is_initialized():
        ray.shutdown()
