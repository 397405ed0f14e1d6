"""Numbers: parsing ("1,234.5", "50%", "1/2", "\\frac{3}{4}", "twenty five", "12.97 g") and the
numerical (precision-aware equality) and regression (mean relative accuracy) families.

Numerical answers are right at the ground truth's precision: a decimal ground truth with d
decimals accepts |p − g| ≤ 0.5·10^−d (12.974 for 12.97, not 3.16 for 3.14); an integer one
needs equality (5.0 is 5); a fraction or percentage one allows a relative 1e-6. The reference's
absolute 0.015 tolerance was meaningless for small magnitudes and "one hundred" read as 101.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from functools import lru_cache
from typing import Any, NamedTuple

from evr1.rewards.registry import FamilyResult, register

_MINUS = str.maketrans({"−": "-", "–": "-", "—": "-", "\u2009": " ", "\u202f": " "})
_FRAC = re.compile(r"\\[dt]?frac\s*\{\s*([^{}]+?)\s*\}\s*\{\s*([^{}]+?)\s*\}")
_NUM = r"[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:[eE][-+]?\d+)?|[-+]?\.\d+"
_TOKEN = re.compile(
    r"(?<![\w.])(?P<num>" + _NUM + r")(?:\s*/\s*(?P<den>" + _NUM + r")(?![\d.])|\s*(?P<pct>%|\\%|percent\b))?"
)
_WORD_SPLIT = re.compile(r"[a-z]+")
_UNITS = {
    "zero": 0, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7,
    "eight": 8, "nine": 9, "ten": 10, "eleven": 11, "twelve": 12, "thirteen": 13,
    "fourteen": 14, "fifteen": 15, "sixteen": 16, "seventeen": 17, "eighteen": 18, "nineteen": 19,
    "twenty": 20, "thirty": 30, "forty": 40, "fifty": 50, "sixty": 60, "seventy": 70,
    "eighty": 80, "ninety": 90,
}  # fmt: skip
_SCALES = {"thousand": 10**3, "million": 10**6, "billion": 10**9}


class Number(NamedTuple):
    """A parsed number and how it was written, which decides the tolerance when it is a ground truth."""

    value: float
    kind: str  # "integer", "decimal", "fraction", "percent", "scientific", "words"
    decimals: int = 0


def _to_float(token: str) -> float:
    return float(token.replace(",", ""))


def _words_value(words: list[str]) -> int | None:
    """The value of a run of English number words ("twenty five" = 25, "one hundred" = 100)."""
    total, current, seen = 0, 0, False
    for word in words:
        if word == "and" and seen:
            continue
        if word in _UNITS:
            current += _UNITS[word]
        elif word == "hundred":
            current = (current or 1) * 100
        elif word in _SCALES:
            total += (current or 1) * _SCALES[word]
            current = 0
        else:
            return None
        seen = True
    return total + current if seen else None


def _number_words(text: str) -> Number | None:
    """The first run of number words in `text` (only called when it has no digits)."""
    words = _WORD_SPLIT.findall(text.lower())
    number_words = _UNITS.keys() | _SCALES.keys() | {"hundred"}
    for start, word in enumerate(words):
        if word in number_words:
            end = start
            while end < len(words) and (words[end] in number_words or (words[end] == "and" and end > start)):
                end += 1
            while end > start and words[end - 1] == "and":
                end -= 1
            value = _words_value(words[start:end])
            return None if value is None else Number(float(value), "words")
    return None


def parse_number(text: str) -> Number | None:
    """The first number written in `text` (digits, fraction, percentage), else number words, else None."""
    if not text:
        return None
    text = text.translate(_MINUS)
    if "frac" in text:
        text = _FRAC.sub(r"\1/\2", text)
    match = _TOKEN.search(text)
    if match is None:
        return _number_words(text)
    token = match.group("num")
    try:
        value = _to_float(token)
        if match.group("den"):
            denominator = _to_float(match.group("den"))
            if denominator == 0:
                return None
            quotient = value / denominator
            return Number(quotient, "fraction") if math.isfinite(quotient) else None
        if match.group("pct"):
            return Number(value / 100.0, "percent")
    except (ValueError, OverflowError):
        return None
    if not math.isfinite(value):
        return None
    mantissa = token.split("e")[0].split("E")[0]
    if "e" in token.lower():
        return Number(value, "scientific")
    if "." in mantissa:
        return Number(value, "decimal", len(mantissa.split(".", 1)[1]))
    return Number(value, "integer")


@lru_cache(maxsize=8192)
def truth_number(answer: str) -> Number | None:
    """`parse_number` for ground truths, which repeat across a group of responses."""
    return parse_number(answer)


def numbers_match(predicted: Number, truth: Number) -> bool:
    """Whether a prediction equals the ground truth at the ground truth's precision."""
    p, g = predicted.value, truth.value
    if truth.kind == "percent" and predicted.kind != "percent" and _close(p / 100.0, g):
        return True  # "50" answering "50%": the model dropped the sign, not the value
    if truth.kind == "decimal":
        return abs(p - g) <= 0.5 * 10.0**-truth.decimals * (1 + 1e-9) + 1e-12 * abs(g)
    if truth.kind in ("integer", "words"):
        return p == g
    return _close(p, g)


def _close(p: float, g: float) -> bool:
    return math.isclose(p, g, rel_tol=1e-6, abs_tol=1e-12)


@register("numerical", "number", "numeric")
def numerical(text: str, sample: Mapping[str, Any]) -> FamilyResult:
    """1 when the answer's number equals the ground truth's at its precision."""
    predicted = parse_number(text)
    truth = truth_number(sample["answer"])
    if predicted is None or truth is None:
        return FamilyResult(0.0, predicted is not None)
    return FamilyResult(float(numbers_match(predicted, truth)), True)


_MRA_THRESHOLDS = tuple(round(0.50 + 0.05 * i, 2) for i in range(10))


def mean_relative_accuracy(predicted: float, truth: float) -> float:
    """VSI-Bench MRA: the fraction of thresholds t in 0.50, 0.55 … 0.95 with |p − g| / |g| < 1 − t."""
    relative = abs(predicted - truth) / (abs(truth) + 1e-8)
    return sum(relative < 1.0 - t for t in _MRA_THRESHOLDS) / len(_MRA_THRESHOLDS)


@register("regression")
def regression(text: str, sample: Mapping[str, Any]) -> FamilyResult:
    """Mean relative accuracy of the answer's number against the ground truth's."""
    predicted = parse_number(text)
    truth = truth_number(sample["answer"])
    if predicted is None or truth is None:
        return FamilyResult(0.0, predicted is not None)
    return FamilyResult(mean_relative_accuracy(predicted.value, truth.value), True)
