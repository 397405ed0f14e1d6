"""Boolean: the last yes/no/true/false word, or a lone 1/0 ("No, it is not" is no; "yes." is yes)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from functools import lru_cache
from typing import Any

from evr1.rewards.extract import last_match
from evr1.rewards.registry import FamilyResult, register

_WORD = re.compile(r"\b(yes|no|true|false)\b", re.IGNORECASE)
_MEANING = {"yes": True, "true": True, "no": False, "false": False}
_LONE = {"1": True, "0": False}
_STRIP = " \t\r\n.!?,;:()[]*\"'`"


def parse_boolean(text: str) -> bool | None:
    """True for yes, False for no, None when the text says neither."""
    last = last_match(_WORD, text)
    if last is not None:
        return _MEANING[last.group(1).lower()]
    return _LONE.get(text.strip(_STRIP))


_truth = lru_cache(maxsize=8192)(parse_boolean)


@register("boolean", "binary classification", "bool", "yes/no", "yes or no")
def boolean(text: str, sample: Mapping[str, Any]) -> FamilyResult:
    """1 when the answer's yes/no equals the ground truth's."""
    predicted = parse_boolean(text)
    truth = _truth(sample["answer"])
    return FamilyResult(float(predicted is not None and predicted == truth), predicted is not None)
