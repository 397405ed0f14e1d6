"""Open-ended answers: normalised exact match, else the mean ROUGE-1/2/L F-measure.

Exact match after normalisation (case, punctuation, articles) scores 1, so a one-word answer
is not capped at 2/3 by an empty ROUGE-2 ("Paris" vs "paris" in the reference). Otherwise the
mean of the ROUGE-1, ROUGE-2 and ROUGE-L F-measures of the original strings, with the ground
truth as the reference (`rouge-score`, Porter stemming), as in the reference.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import lru_cache
from typing import Any

from evr1.rewards.extract import normalize_text
from evr1.rewards.registry import FamilyResult, register


@lru_cache(maxsize=1)
def _scorer() -> Any:
    from rouge_score import rouge_scorer  # imported on first use: nltk and friends are slow to load

    return rouge_scorer.RougeScorer(["rouge1", "rouge2", "rougeL"], use_stemmer=True)


def rouge_mean(reference: str, prediction: str) -> float:
    """Mean of the ROUGE-1, ROUGE-2 and ROUGE-L F-measures, in [0, 1]."""
    scores = _scorer().score(reference, prediction)
    return sum(s.fmeasure for s in scores.values()) / len(scores)


@register(
    "open-ended",
    "open_ended",
    "video qa",
    "free-form",
    "video description",
    "description",
    "caption",
    "captioning",
    prepare=_scorer,
)
def open_ended(text: str, sample: Mapping[str, Any]) -> FamilyResult:
    truth = sample["answer"]
    answer = text.strip()
    if not answer or not truth:
        return FamilyResult(0.0, bool(answer))
    expected = normalize_text(truth)
    if expected and normalize_text(answer) == expected:
        return FamilyResult(1.0, True)
    return FamilyResult(rouge_mean(truth, answer), True)
