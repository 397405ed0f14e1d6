"""Reward weights: overall = accuracy_weight·accuracy + format_weight·format, checked once at config time."""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

_SUM_TOLERANCE = 1e-6


@dataclass(frozen=True)
class RewardWeights:
    """Validated weights: each in [0, 1], summing to 1 (so overall stays in [0, 1])."""

    accuracy_weight: float = 0.9
    format_weight: float = 0.1

    def __post_init__(self) -> None:
        for field in ("accuracy_weight", "format_weight"):
            value = getattr(self, field)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise ValueError(f"reward weights: {field} must be a finite number, got {value!r}")
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"reward weights: {field} must lie in [0, 1], got {value!r}")
        total = self.accuracy_weight + self.format_weight
        if abs(total - 1.0) > _SUM_TOLERANCE:
            raise ValueError(
                f"reward weights: accuracy_weight + format_weight must be 1, got "
                f"{self.accuracy_weight!r} + {self.format_weight!r} = {total!r}"
            )

    def overall(self, accuracy: float, format_score: float) -> float:
        overall = self.accuracy_weight * accuracy + self.format_weight * format_score
        return min(1.0, max(0.0, overall))  # weights may sum to 1 ± 1e-6


@lru_cache(maxsize=64)
def check_weights(accuracy_weight: float = 0.9, format_weight: float = 0.1) -> RewardWeights:
    """Validate a weight pair (ValueError naming the field) and return it; cheap to call per item."""
    return RewardWeights(accuracy_weight, format_weight)
