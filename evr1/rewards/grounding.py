"""Grounding: temporal (1-D IoU), spatial (2-D IoU), spatial-temporal and tracking (per-second boxes).

Answers are JSON objects (`{"time": [s, e]}`, `{"boxes": [x1, y1, x2, y2]}`,
`{"boxes": {"<second>": box, …}}`), found in code fences or surrounding text. IoUs use continuous
coordinates (no +1). An interval with e < s or a box with x2 < x1 or y2 < y1 is invalid: it does
not parse (format 0.5) and scores 0. Box means are taken over the ground truth's seconds, so a
second the prediction lacks counts 0 (the reference averaged over the common seconds only, which
rewarded predicting a single box).

Training rewards (`register_shaping`, chosen by `reward.grounding` for training only): temporal
grounding's `tiou_distance`, Time-R1's IoU with penalties on the start and end distances
(`distance_penalised_iou`). `accuracy`, and so validation and the held-out metric, stay plain IoU.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from functools import lru_cache
from typing import Any

from evr1.rewards.extract import load_json_object
from evr1.rewards.registry import FamilyResult, register, register_shaping

Interval = tuple[float, float]
Box = tuple[float, float, float, float]

_NUMBER = r"(-?\d+(?:\.\d+)?)"
_SECONDS = r"(?:s|secs?|seconds?)\b"
# "from 10 to 20 seconds", "between 3.5 and 7 s", "10-20 seconds", "10 s to 20 s", "in 10~20s"
_RANGES = (
    re.compile(
        r"\b(?:from|between)\s+" + _NUMBER + r"\s*(?:" + _SECONDS + r")?\s*(?:to|and|-|–|~)\s*" + _NUMBER,
        re.IGNORECASE,
    ),
    re.compile(
        _NUMBER + r"\s*(?:" + _SECONDS + r")?\s*(?:to|-|–|~)\s*" + _NUMBER + r"\s*" + _SECONDS,
        re.IGNORECASE,
    ),
)


def _finite(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        return None
    try:
        number = float(value)
    except (TypeError, ValueError, OverflowError):
        return None
    return number if math.isfinite(number) else None


def as_interval(value: Any) -> Interval | None:
    """A valid `[s, e]` (two finite numbers, e ≥ s), else None."""
    if not isinstance(value, (list, tuple)) or len(value) != 2:
        return None
    start, end = _finite(value[0]), _finite(value[1])
    if start is None or end is None or end < start:
        return None
    return start, end


def as_box(value: Any) -> Box | None:
    """A valid `[x1, y1, x2, y2]` (x2 ≥ x1, y2 ≥ y1); a list holding exactly one box is that box."""
    if isinstance(value, (list, tuple)) and len(value) == 1 and isinstance(value[0], (list, tuple)):
        value = value[0]
    if not isinstance(value, (list, tuple)) or len(value) != 4:
        return None
    coords = [_finite(v) for v in value]
    if any(c is None for c in coords):
        return None
    x1, y1, x2, y2 = coords  # type: ignore[misc]
    if x2 < x1 or y2 < y1:
        return None
    return x1, y1, x2, y2


def interval_iou(a: Interval, b: Interval) -> float:
    """1-D IoU of two valid intervals (0 when their union has no length)."""
    inter = max(0.0, min(a[1], b[1]) - max(a[0], b[0]))
    union = (a[1] - a[0]) + (b[1] - b[0]) - inter
    return inter / union if union > 1e-12 else 0.0


def box_iou(a: Box, b: Box) -> float:
    """2-D IoU of two valid boxes (0 when their union has no area)."""
    width = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    height = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    inter = width * height
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return inter / union if union > 1e-12 else 0.0


def _second_key(key: Any) -> str | None:
    """Canonical spelling of a per-second key: "9", "9.0" and 9 are the same second."""
    number = _finite(key)
    if number is None:
        return None
    return str(int(number)) if number.is_integer() else repr(number)


def as_track(value: Any) -> dict[str, Box | None] | None:
    """A `{"<second>": box}` object with canonical keys (invalid boxes kept as None), else None."""
    if not isinstance(value, dict):
        return None
    track: dict[str, Box | None] = {}
    for key, box in value.items():
        second = _second_key(key)
        if second is not None:
            track[second] = as_box(box)
    return track


def mean_track_iou(predicted: dict[str, Box | None] | None, truth: dict[str, Box | None]) -> float:
    """Mean box IoU over the ground truth's seconds; a second missing from the prediction counts 0."""
    seconds = [s for s, box in truth.items() if box is not None]
    if not seconds:
        return 0.0
    predicted = predicted or {}
    total = 0.0
    for second in seconds:
        box = predicted.get(second)
        if box is not None:
            total += box_iou(box, truth[second])  # type: ignore[arg-type]
    return total / len(seconds)


def spoken_interval(text: str) -> Interval | None:
    """The last time range written in words: "from 10 to 20 seconds", "10-20 s", "between 3 and 7"."""
    best = None
    for pattern in _RANGES:
        for match in pattern.finditer(text):
            if best is None or match.start() >= best.start():
                best = match
    if best is None:
        return None
    return as_interval([best.group(1), best.group(2)])


@lru_cache(maxsize=8192)
def _truth_object(answer: str) -> dict | None:
    return load_json_object(answer)


def _time_of(obj: dict | None) -> Interval | None:
    return as_interval(obj.get("time")) if obj is not None else None


def _temporal_answer(text: str, sample: Mapping[str, Any]) -> tuple[Interval | None, Interval | None, bool]:
    """(predicted, ground truth, parsed): the `time` of the answer's JSON, else a spoken range (which
    counts for accuracy but not as parsed)."""
    obj = load_json_object(text)
    predicted = _time_of(obj)
    parsed = predicted is not None
    if predicted is None and (obj is None or "time" not in obj):
        predicted = spoken_interval(text)
    return predicted, _time_of(_truth_object(sample["answer"])), parsed


@register("temporal grounding", "temporal localization", "moment retrieval")
def temporal_grounding(text: str, sample: Mapping[str, Any]) -> FamilyResult:
    """1-D IoU of `time`; accuracy also reads a spoken range ("from 10 to 20 seconds")."""
    predicted, truth, parsed = _temporal_answer(text, sample)
    if predicted is None or truth is None:
        return FamilyResult(0.0, parsed)
    return FamilyResult(interval_iou(predicted, truth), parsed)


def distance_penalised_iou(predicted: Interval, truth: Interval, duration: float | None = None) -> float:
    """Time-R1's timestamp-aware IoU reward: IoU · (1 − |s − ŝ| / t) · (1 − |e − ê| / t).

    From Wang et al., "Time-R1: Post-Training Large Vision Language Model for Temporal Video
    Grounding" (2025, arXiv:2503.13377), the tIoU reward of its RL stage; the formula as its code
    computes it (xiaomi-research/time-r1, `main.py`, `iou_timestamp_reward_v2`), with (s, e) the
    ground truth, (ŝ, ê) the prediction and t the video's duration in seconds.

    Why: plain IoU is 0 for every interval that misses the truth, however near, and on a clip cut
    into k equal segments a contiguous hedge over m of them scores, in expectation, exactly what a
    uniform guess does (both 1/k): nothing tells the policy to commit. The distance factors make a
    near miss worth less than a hit and a wide hedge worth less than a guess.

    `duration` None (or not a positive finite number): t = max(e, ê), the shortest clip starting at
    0 that holds both intervals; shorter than the true clip, so the penalties are harsher than
    Time-R1's. Each factor is clipped at 0 (an end more than t away), so the reward lies in [0, 1];
    Time-R1's unclipped product can go below 0 only for a prediction outside the clip.
    """
    iou = interval_iou(predicted, truth)
    t = duration if duration is not None and math.isfinite(duration) and duration > 0 else max(truth[1], predicted[1])
    if iou <= 0.0 or t <= 0.0:
        return 0.0
    start = max(0.0, 1.0 - abs(truth[0] - predicted[0]) / t)
    end = max(0.0, 1.0 - abs(truth[1] - predicted[1]) / t)
    return iou * start * end


@register_shaping("temporal grounding", "tiou_distance")
def temporal_tiou_distance(text: str, sample: Mapping[str, Any]) -> float:
    """`distance_penalised_iou` of the answer's `time`, normalised by the sample's `duration`
    (seconds; the synthetic sets carry it), else by max(e, ê)."""
    predicted, truth, _ = _temporal_answer(text, sample)
    if predicted is None or truth is None:
        return 0.0
    return distance_penalised_iou(predicted, truth, _finite(sample.get("duration")))


@register("spatial grounding", "visual grounding")
def spatial_grounding(text: str, sample: Mapping[str, Any]) -> FamilyResult:
    """2-D IoU of `boxes` (one box)."""
    obj = load_json_object(text)
    predicted = as_box(obj.get("boxes")) if obj is not None else None
    truth_obj = _truth_object(sample["answer"])
    truth = as_box(truth_obj.get("boxes")) if truth_obj is not None else None
    if predicted is None or truth is None:
        return FamilyResult(0.0, predicted is not None)
    return FamilyResult(box_iou(predicted, truth), True)


@register(
    "spatial-temporal grounding",
    "spatio-temporal grounding",
    "spatiotemporal grounding",
    "st grounding",
    "stvg",
)
def spatial_temporal_grounding(text: str, sample: Mapping[str, Any]) -> FamilyResult:
    """0.5·tIoU + 0.5·mean box IoU over the ground truth's seconds; tIoU alone without GT boxes.

    Format needs a valid `time` and a `boxes` object (which may be empty).
    """
    obj = load_json_object(text)
    interval = _time_of(obj)
    track = as_track(obj.get("boxes")) if obj is not None else None
    parsed = interval is not None and track is not None
    if interval is None and (obj is None or "time" not in obj):
        interval = spoken_interval(text)
    truth_obj = _truth_object(sample["answer"])
    truth_interval = _time_of(truth_obj)
    if truth_interval is None:
        return FamilyResult(0.0, parsed)
    t_iou = interval_iou(interval, truth_interval) if interval is not None else 0.0
    truth_track = as_track(truth_obj.get("boxes")) or {}  # type: ignore[union-attr]
    if not any(box is not None for box in truth_track.values()):
        return FamilyResult(t_iou, parsed)
    return FamilyResult(0.5 * t_iou + 0.5 * mean_track_iou(track, truth_track), parsed)


@register("tracking", "object tracking")
def tracking(text: str, sample: Mapping[str, Any]) -> FamilyResult:
    """Mean box IoU over the ground truth's seconds (format needs a `boxes` object)."""
    obj = load_json_object(text)
    track = as_track(obj.get("boxes")) if obj is not None else None
    truth_obj = _truth_object(sample["answer"])
    truth_track = as_track(truth_obj.get("boxes")) if truth_obj is not None else None
    if truth_track is None:
        return FamilyResult(0.0, track is not None)
    return FamilyResult(mean_track_iou(track, truth_track), track is not None)
