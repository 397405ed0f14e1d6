"""Accuracy per task family, for training and validation metrics (`reward/accuracy/<family>`,
`val/accuracy/<family>`): a rise overall can hide a family stuck at chance.

A sample's family is its `synth_kind` (the synthetic sets) when it has one, else its problem type.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from evr1.data.ingest import reward_sample


def family(row: Mapping[str, Any]) -> str:
    s = reward_sample(dict(row))
    return str(s.get("synth_kind") or s.get("problem_type") or "unknown").replace(" ", "_")


def accuracy_by_family(rows: Sequence[Mapping], scores: Sequence[Mapping], prefix: str) -> dict[str, float]:
    """`{prefix}/<family>`: the mean accuracy of each family's responses."""
    per: dict[str, list[float]] = defaultdict(list)
    for row, score in zip(rows, scores):
        per[family(row)].append(float(score.get("accuracy", 0.0)))
    return {f"{prefix}/{name}": float(np.mean(v)) for name, v in sorted(per.items())}
