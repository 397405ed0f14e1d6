"""Preference (LLaVA-critic style): which of two responses is better, or a tie.

Labels are read case-insensitively anywhere in the text, the same way in the ground truth and the
answer: "response 1", "A", "first" → 1; "response 2", "B", "second" → 2; "tie", "equal",
"equally", "both" → tie. The first label in reading order wins ("Response 2 is better than
Response 1" is 2). A bare "a"/"b" counts only as the whole answer or after "response",
"answer", "assistant" or "option": the article in "it is a tie" is not a vote for response 1.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from functools import lru_cache
from typing import Any

from evr1.rewards.registry import FamilyResult, register

TIE = 0
_LABEL = re.compile(
    r"\b(?:(?:response|answer|assistant|option|output)\s*(?:#\s*)?(?P<named>[12ab])\b"
    r"|(?P<first>first|1st)\b|(?P<second>second|2nd)\b"
    r"|(?P<tie>tie|tied|equal|equally|both)\b)",
    re.IGNORECASE,
)
_BARE = {"1": 1, "a": 1, "2": 2, "b": 2}
_STRIP = " \t\r\n.!?,;:()[]*\"'`"


def parse_preference(text: str) -> int | None:
    """1 or 2 for the preferred response, 0 (TIE) for a tie, None when the text gives no label."""
    bare = _BARE.get(text.strip(_STRIP).lower())
    if bare is not None:
        return bare
    match = _LABEL.search(text)
    if match is None:
        return None
    if match.group("named"):
        return _BARE[match.group("named").lower()]
    if match.group("first"):
        return 1
    if match.group("second"):
        return 2
    return TIE


_truth = lru_cache(maxsize=8192)(parse_preference)


@register("preference", "llava", "critic")
def preference(text: str, sample: Mapping[str, Any]) -> FamilyResult:
    """1 when the answer's label equals the ground truth's."""
    predicted = parse_preference(text)
    truth = _truth(sample["answer"])
    return FamilyResult(float(predicted is not None and predicted == truth), predicted is not None)
