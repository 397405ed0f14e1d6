"""Observability: MLflow runs and the model registry (`tracker`), progress bars and their sinks
(`progress`), the plots a run logs (`plots`).

`from evr1.tracking import Tracker` is the import users write; the modules are importable too.
"""

from evr1.tracking.tracker import (MODEL_URI_PREFIX, Tracker, default_tracking_uri, latest_model_version, owner_tags,
                                  resolve_model_uri, signals_held)

__all__ = ["MODEL_URI_PREFIX", "Tracker", "default_tracking_uri", "latest_model_version", "owner_tags",
           "resolve_model_uri", "signals_held"]
