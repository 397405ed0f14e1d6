"""OCR: 1 − word error rate (jiwer) against the ground truth, clipped to [0, 1].

Case and runs of whitespace are ignored (a recogniser is not asked for letter case); punctuation
counts, because it is part of the text on screen.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from functools import lru_cache
from typing import Any

from evr1.rewards.registry import FamilyResult, register

_SPACES = re.compile(r"\s+")


def _words(text: str) -> str:
    return _SPACES.sub(" ", text.lower()).strip()


def word_error_rate(reference: str, hypothesis: str) -> float:
    """jiwer's WER of `hypothesis` against a non-empty `reference` (1.0 for an empty hypothesis)."""
    if not hypothesis:
        return 1.0
    return float(_jiwer().wer(reference, hypothesis))


@lru_cache(maxsize=1)
def _jiwer() -> Any:
    import jiwer  # imported on first use

    return jiwer


@register("ocr", "text recognition", prepare=_jiwer)
def ocr(text: str, sample: Mapping[str, Any]) -> FamilyResult:
    truth, answer = _words(sample["answer"]), _words(text)
    if not truth:
        return FamilyResult(0.0, bool(answer))
    return FamilyResult(max(0.0, 1.0 - word_error_rate(truth, answer)), bool(answer))
