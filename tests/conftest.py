"""Test-wide settings: offline, quiet, and one Ray instance per session (each init costs seconds)."""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")

import pytest  # noqa: E402


@pytest.fixture(scope="session", autouse=True)
def _ray_shutdown_at_end():
    yield
    import ray

    if ray.is_initialized():
        ray.shutdown()
