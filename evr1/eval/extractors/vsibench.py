"""VSI-Bench's official scoring (`vision-x-nyu/thinking-in-space`, `lmms_eval/tasks/vsibench/utils.py`).

- Answer reading (`fuzzy_matching`): the first whitespace token of the answer with a trailing "."
  removed. Multiple choice: correct when it equals the ground-truth letter, case-insensitively
  ("The answer is A" → "The" → wrong). Numeric: `float()` of that token; unparseable → 0
  ("3.5 meters." → 3.5, "about three" → 0, "There are 5 chairs" → 0).
- MRA(p, g) = mean over θ ∈ linspace(0.50, 0.95, 10) of 1[|p − g| / g ≤ 1 − θ] (≤, as the official
  code; EasyVideoR1's "<" scores 5 vs 4 as 0.5 instead of 0.6).

The numeric parser is the official one, not lmms-eval's later number-word parser ("twenty-one" →
21), so scores compare with the benchmark's own numbers; a model is asked for a single word or phrase.
Deviation: the first token is split on any whitespace (the official `split(" ")` reads "3.5\\nmeters"
as one token and fails), and g = 0 scores 1 only for p = 0 (the official code divides by zero).
"""

from __future__ import annotations

import math

import numpy as np

THRESHOLDS = np.linspace(0.5, 0.95, int((0.95 - 0.5) / 0.05 + 2))  # 10 points: the official arithmetic


def first_token(text: str) -> str:
    """The official `fuzzy_matching`: first token, trailing "." removed."""
    tokens = (text or "").split()
    return tokens[0].rstrip(".").strip() if tokens else ""


def to_float(text: str) -> float | None:
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def mra(pred: float, gt: float) -> float:
    """Mean relative accuracy over the 10 official thresholds, with ≤."""
    if gt == 0:
        return 1.0 if pred == 0 else 0.0
    rel = abs(pred - gt) / abs(gt)
    return float(np.mean(rel <= 1 - THRESHOLDS))
