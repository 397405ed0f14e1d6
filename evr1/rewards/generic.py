"""Generic: what an unknown `problem_type` is scored with (and the explicit type "generic").

Normalised exact match (case, punctuation, articles); when either side normalises to nothing
(e.g. "?" or "$"), the trimmed lower-cased strings are compared instead. Failing that,
math-verify equivalence under the item's time limit, tried only when both sides look
mathematical (so "Paris" never equals "sirap" as a product of symbols).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from evr1.rewards.extract import normalize_text
from evr1.rewards.math import equivalent, load_math_verify, looks_mathematical, prepare_math_verify
from evr1.rewards.registry import GENERIC, FamilyResult, register
from evr1.rewards.timeouts import run_limited


@register(GENERIC, prepare=prepare_math_verify)  # its maths-looking answers use math-verify
def generic(text: str, sample: Mapping[str, Any]) -> FamilyResult:
    truth, answer = sample["answer"], text.strip()
    if not answer or not truth:
        return FamilyResult(0.0, bool(answer))
    expected, given = normalize_text(truth), normalize_text(answer)
    if expected and given:
        if given == expected:
            return FamilyResult(1.0, True)
    elif answer.lower() == truth.strip().lower():
        return FamilyResult(1.0, True)
    if looks_mathematical(truth) and looks_mathematical(answer):
        equal, _ = run_limited(equivalent, truth, answer, prepare=load_math_verify)
        return FamilyResult(float(equal), True)
    return FamilyResult(0.0, True)
