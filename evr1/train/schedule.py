"""Learning-rate schedules for the RL steps: linear warm-up, then constant, cosine or step decay."""

from __future__ import annotations

import math
from collections.abc import Sequence


def lr_at(step: int, *, base: float, total: int, warmup: int = 0, schedule: str = "constant",
          min_ratio: float = 0.0, milestones: Sequence[int] = (), gamma: float = 0.1) -> float:
    """The learning rate of RL step `step` (1-based) out of `total`.

    step: `base` × `gamma`^k from the step after the k-th milestone on (PyTorch's MultiStepLR; the
    milestones are absolute steps, so raising `total` to continue a run leaves them where they were).
    """
    if warmup and step <= warmup:
        return base * step / warmup
    if schedule == "constant":
        return base
    if schedule == "step":
        return base * gamma ** sum(step > m for m in milestones)
    if schedule == "cosine":
        span = max(total - warmup, 1)
        progress = min(max(step - warmup, 0) / span, 1.0)
        return base * (min_ratio + (1.0 - min_ratio) * 0.5 * (1.0 + math.cos(math.pi * progress)))
    raise ValueError(f"unknown lr schedule {schedule!r}; known: constant, cosine, step")
