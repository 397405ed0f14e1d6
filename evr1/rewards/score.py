"""Scoring one response: find the answer, ask the family, combine accuracy and format.

The tag and format logic lives here and nowhere else:

* format is 0 with no answer tag (or an empty one), 0.5 when the tag's content does not parse for
  the family, 1 when it does;
* accuracy reads the tag's content (a `\\boxed{}` inside it unwrapped) or, without a tag, the
  fallback answer of `extract.fallback_answer`;
* nothing a response or a sample contains makes this raise: what fails scores 0 and is counted
  (`errors` in the batch metrics); only a scorer that cannot run here (`RewardHelperError`) raises.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from evr1.rewards import extract
from evr1.rewards.registry import Family, check_shaping, family_for, get_shaping, prepare_family
from evr1.rewards.timeouts import (
    DEFAULT_TIMEOUT,
    ItemTimeout,
    RewardHelperError,
    check_timeout,
    item_timeout,
)
from evr1.rewards.weights import RewardWeights, check_weights


class RewardWarning(UserWarning):
    """`compute_score` scored an item 0 because it timed out or failed (the batch API counts these)."""


@dataclass(frozen=True)
class ItemInfo:
    """How an item was scored, for batch metrics (never part of the reward itself)."""

    family: str
    known_type: bool
    problem_type: str
    timed_out: bool = False
    error: str | None = None


def _clip(value: Any) -> float:
    try:
        value = float(value)
    except (TypeError, ValueError):
        return 0.0
    if not value > 0.0:  # also maps NaN to 0
        return 0.0
    return min(value, 1.0)


def _family_call(family: Family, text: str, sample: Mapping[str, Any]) -> tuple[float, bool]:
    accuracy, parsed = family.fn(text, sample)
    return _clip(accuracy), bool(parsed)


def score_item(
    response: Any,
    sample: Any,
    weights: RewardWeights,
    timeout: float | None = DEFAULT_TIMEOUT,
    shaping: tuple[tuple[str, str], ...] = (),
) -> tuple[dict[str, float], ItemInfo]:
    """Score one response; returns the score dict and how it was scored.

    `shaping` (`check_shaping`'s form): per family, the training reward that stands in for accuracy
    in `overall`; `accuracy` itself is always the family's."""
    timeout = check_timeout(timeout)
    if not isinstance(sample, Mapping):
        sample = {}
    raw_type = sample.get("problem_type")
    family, known = family_for(raw_type)
    type_label = raw_type.strip().lower() if isinstance(raw_type, str) else repr(raw_type)
    if not isinstance(response, str):
        response = "" if response is None else str(response)

    ground_truth = extract.unwrap_ground_truth(sample.get("answer"))
    view = dict(sample)
    view["answer"] = ground_truth  # families always see the unwrapped ground truth

    tag = extract.answer_tag(response)
    shaped_by = dict(shaping).get(family.name)
    prepare_family(family)  # its one-time set-up (a slow import) is not charged to this item's limit
    timed_out, error = False, None
    try:
        with item_timeout(timeout):
            if tag:
                text = extract.unbox(tag) if family.unbox else tag
                accuracy, parsed = _family_call(family, text, view)
                format_score = 1.0 if parsed else 0.5
            else:
                text = extract.fallback_answer(response)
                accuracy, _ = _family_call(family, text, view)
                format_score = 0.0
            reward = _clip(get_shaping(family.name, shaped_by)(text, view)) if shaped_by else accuracy
    except ItemTimeout:
        accuracy, format_score, timed_out = 0.0, 0.0, True
    except RewardHelperError:
        raise  # scoring cannot work on this machine (no helper, no sandbox): never a silent 0 for every item
    except Exception as exc:  # a family bug or a pathological input: score 0, report it in metrics
        accuracy, format_score, error = 0.0, 0.0, f"{type(exc).__name__}: {exc}"
    if timed_out or error or not ground_truth:
        accuracy = reward = 0.0
    scores = {
        "overall": weights.overall(reward, format_score),
        "accuracy": accuracy,
        "format": format_score,
    }
    return scores, ItemInfo(family.name, known, type_label, timed_out, error)


def compute_score(
    response: str,
    sample: Mapping[str, Any],
    *,
    accuracy_weight: float = 0.9,
    format_weight: float = 0.1,
    timeout: float | None = DEFAULT_TIMEOUT,
    shaping: Mapping[str, str] | None = None,
) -> dict[str, float]:
    """Score one response against one sample: `{"overall", "accuracy", "format"}`, each in [0, 1].

    `sample` carries `problem_type` and `answer`, optionally `options`, `data_type`, `problem` and
    family fields (e.g. `tests` for code). Invalid weights and an invalid `timeout` raise
    `ValueError`; a machine that cannot score (no code sandbox: `SandboxUnavailable`; no helper
    process: `RewardHelperError`) raises; nothing in a response or a sample raises.
    `timeout` (seconds, or None for no limit) bounds the families that need it (math, code); an
    item that times out or fails scores 0 with a `RewardWarning` saying why.
    `shaping` (`{family: name}`, e.g. `{"temporal grounding": "tiou_distance"}`) forms `overall`
    from a registered training reward instead of the accuracy of that family's items
    (`register_shaping`); `accuracy` is unchanged. An unknown one raises `ValueError`.
    """
    weights = check_weights(accuracy_weight, format_weight)
    scores, info = score_item(response, sample, weights, timeout, check_shaping(shaping))
    if info.timed_out:
        warnings.warn(f"compute_score: {info.family} item exceeded its time limit ({timeout} s); scored 0",
                      RewardWarning, stacklevel=2)
    elif info.error:
        warnings.warn(f"compute_score: {info.family} item failed and scored 0: {info.error}", RewardWarning,
                      stacklevel=2)
    return scores
