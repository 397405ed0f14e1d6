"""Observability: MLflow runs and the model registry (`tracker`), progress bars and their sinks
(`progress`), the plots a run logs (`plots`).

`from evr1.tracking import Tracker` is the import users write; the modules are importable too. The
names below are loaded on first use (PEP 562): importing `evr1.tracking.progress` or
`evr1.tracking.store_init` must not import MLflow (seconds of `evr1 run`'s start-up).
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["MODEL_URI_PREFIX", "Tracker", "default_tracking_uri", "latest_model_version", "owner_tags",
           "resolve_model_uri", "signals_held"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        return getattr(importlib.import_module("evr1.tracking.tracker"), name)
    if name in ("progress", "plots", "timings", "tracker", "store_init"):
        return importlib.import_module(f"evr1.tracking.{name}")
    raise AttributeError(f"module 'evr1.tracking' has no attribute {name!r}")
