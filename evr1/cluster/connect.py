"""Starting or joining Ray with settings that fit a 2-core laptop as well as a cluster."""

from __future__ import annotations

import os

import ray

from evr1.cluster.local import start_local

# Set before any ray.init: no usage reporting (no network here), no token auth prompt on a laptop.
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("RAY_AUTH_MODE", "disabled")


def ensure_ray(address: str | None = None, *, num_cpus: int | None = 2, object_store_mb: int = 256) -> None:
    """Connect to `address`, or start a small local instance once per process (init costs 3-6 s)."""
    if ray.is_initialized():
        return
    runtime_env = {"env_vars": {"TOKENIZERS_PARALLELISM": "false", "HF_HUB_OFFLINE": os.environ.get("HF_HUB_OFFLINE", "1"),
                                # weight-loading bars of the actors: nothing a user can act on
                                "HF_HUB_DISABLE_PROGRESS_BARS": os.environ.get("HF_HUB_DISABLE_PROGRESS_BARS", "1")}}
    if address:
        # A cluster may download; honour the driver's HF_HUB_OFFLINE only when it was set explicitly.
        if "HF_HUB_OFFLINE" not in os.environ:
            runtime_env["env_vars"].pop("HF_HUB_OFFLINE")
        ray.init(address=address, logging_level="WARNING", log_to_driver=True, runtime_env=runtime_env)
        return
    # A local instance dies with this command, even after a kill -9 (evr1.cluster.local's watchdog).
    start_local(
        num_cpus=num_cpus,
        include_dashboard=False,
        object_store_memory=object_store_mb * 1024 * 1024,
        logging_level="WARNING",
        runtime_env=runtime_env,
    )
