"""What the driver sends to its actors, measured: bytes per call and whether any payload holds an array.

The driver must pass references (sample rows, handles, cache keys), never frames or tensors: the
reference project's design principle, and the fix for drivers whose host memory grows with the batch.
Every actor call goes through `MessageLog.call`, so the figures are of the real messages.
"""

from __future__ import annotations

import pickle
from collections.abc import Mapping
from dataclasses import dataclass, fields, is_dataclass

import numpy as np
import torch


def holds_array(obj, depth: int = 0) -> bool:
    """True if `obj` (nested containers and dataclasses included) contains a tensor or an ndarray."""
    if isinstance(obj, (torch.Tensor, np.ndarray)):
        return True
    if depth > 8 or isinstance(obj, (str, bytes, int, float, bool, type(None))):
        return False
    if isinstance(obj, Mapping):
        return any(holds_array(v, depth + 1) for v in obj.values())
    if isinstance(obj, (list, tuple, set)):
        return any(holds_array(v, depth + 1) for v in obj)
    if is_dataclass(obj) and not isinstance(obj, type):
        return any(holds_array(getattr(obj, f.name), depth + 1) for f in fields(obj))
    return False


@dataclass
class MessageLog:
    """Totals since the last `take()`: calls, pickled bytes, and calls that carried an array."""

    calls: int = 0
    bytes: int = 0
    array_calls: int = 0

    def call(self, method, *args):
        """`method.remote(*args)`, counted. Object refs pass through as refs (their bytes are not the driver's)."""
        self.calls += 1
        self.bytes += len(pickle.dumps(args, protocol=5)) if not _has_ref(args) else _size_without_refs(args)
        self.array_calls += holds_array(args)
        return method.remote(*args)

    def take(self) -> dict[str, int]:
        out = {"calls": self.calls, "bytes": self.bytes, "array_calls": self.array_calls}
        self.calls = self.bytes = self.array_calls = 0
        return out


def _has_ref(args) -> bool:
    import ray

    return any(isinstance(a, ray.ObjectRef) for a in args)


def _size_without_refs(args) -> int:
    import ray

    return sum(len(pickle.dumps(a, protocol=5)) for a in args if not isinstance(a, ray.ObjectRef))
