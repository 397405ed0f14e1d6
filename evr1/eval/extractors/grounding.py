"""Temporal and spatio-temporal grounding: reading a predicted span (and boxes), IoU.

Two answer forms are read:
- EasyVideoR1's JSON, `{"time": [s, e]}` (plus `"boxes": {"<second>": [x1, y1, x2, y2]}` for STVG), inside
  `<answer>…</answer>` or anywhere in the text (the last JSON object with a `time` or `boxes` key);
- free text, by lmms-eval's Charades-STA `extract_time` (`charades_sta/utils.py`, commit 75571cf):
  lower-case; the prompt's example phrase removed; every "to" replaced by "-" ("from 24.3 seconds to
  30.4 seconds" → "… seconds - 30.4 seconds", which no stage reads); sentences split on `! ? newline`;
  candidate sentences are those with a keyword (start / end / happen…), or all sentences when none
  has one. Stages, the first that finds anything decides; the range stages take every match of the
  FIRST candidate sentence that has one:
  1. "m:ss - m:ss" / "h:mm:ss – h:mm:ss" ranges (hyphen or en dash);
  2. "a - b" numbers (hyphen or en dash);
  3. every m:ss / h:mm:ss time of every candidate sentence, paired in order;
  4. the first number of each candidate sentence, paired in order;
  5. "a s - b s".
  The first pair is the answer, swapped if reversed.

IoU (both): intersection / (max end − min start); a union ≤ 0 gives 0 (as lmms-eval's `iou`).

Deviations: a reversed JSON span is swapped like a text one (EasyVideoR1 scores it 0); several JSON
objects are read one by one (EasyVideoR1's greedy `{…}` span breaks on two).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL | re.IGNORECASE)
_EXAMPLE = "a specific example is : 20.8 - 30.0 seconds"
_KEYWORDS = ("starts", "ends", "happens in", "start time", "end time", "start", "end", "happen")
_CLOCK = r"\d{1,2}:\d{2}(?::\d{2})?"
_CLOCK_RANGE = re.compile(rf"\b({_CLOCK})\s*[–-]\s*({_CLOCK})\b")
_NUM_RANGE = re.compile(r"(\d+(?:\.\d+)?)\s*[–-]\s*(\d+(?:\.\d+)?)")
_NUMBER = re.compile(r"\b(\d+(?:\.\d+)?)\b")
_CLOCK_TIME = re.compile(rf"\b({_CLOCK})\b")
_SECONDS_RANGE = re.compile(r"(\d+(?:\.\d+)?)\s*s?\s*[–-]\s*(\d+(?:\.\d+)?)\s*s?")

Span = tuple[float, float]


def _clock(text: str) -> float:
    secs = 0.0
    for part in text.split(":"):
        secs = secs * 60 + float(part)
    return secs


def _pairs(values: Sequence[float]) -> list[Span]:
    values = list(values)[: len(values) // 2 * 2]
    return [(values[i], values[i + 1]) for i in range(0, len(values), 2)]


def _first_ranges(sentences: Sequence[str], pattern: re.Pattern[str], conv) -> list[Span]:
    """Every match of `pattern` in the first sentence that has one, converted by `conv`."""
    for sentence in sentences:
        found = pattern.findall(sentence)
        if found:
            return [(conv(a), conv(b)) for a, b in found]
    return []


def extract_time(text: str) -> list[Span]:
    """lmms-eval's `extract_time`: the first time pair found in free text, ordered (or [])."""
    p = (text or "").lower().replace(_EXAMPLE, "").replace("to", "-")
    sentences = re.split(r"[!?\n]", p)
    candidates = [s for s in sentences if any(k in s for k in _KEYWORDS)] or sentences
    stages = (
        lambda: _first_ranges(candidates, _CLOCK_RANGE, _clock),
        lambda: _first_ranges(candidates, _NUM_RANGE, float),
        lambda: _pairs([_clock(t) for s in candidates for t in _CLOCK_TIME.findall(s)]),
        lambda: _pairs([float(m[0]) for s in candidates if (m := _NUMBER.findall(s))]),
        lambda: _first_ranges(candidates, _SECONDS_RANGE, float),
    )
    for stage in stages:
        found = stage()
        if found:
            s, e = found[0]
            return [(s, e) if e > s else (e, s)]
    return []


def json_answer(text: str) -> dict[str, Any] | None:
    """The grounding JSON of an answer: the `<answer>` content if it parses, else the last JSON object
    in the text that has a `time` or `boxes` key."""
    text = text or ""
    for block in reversed(_ANSWER.findall(text)):
        try:
            obj = json.loads(block.strip())
        except json.JSONDecodeError:
            continue
        if isinstance(obj, dict):
            return obj
    dec, found = json.JSONDecoder(), None
    for m in re.finditer(r"\{", text):
        try:
            obj, _ = dec.raw_decode(text, m.start())
        except json.JSONDecodeError:
            continue
        if isinstance(obj, dict) and ("time" in obj or "boxes" in obj):
            found = obj
    return found


def span_of(value: Any) -> Span | None:
    """[s, e] as an ordered pair of floats, or None when it is not two numbers."""
    if not isinstance(value, (list, tuple)) or len(value) != 2:
        return None
    try:
        s, e = float(value[0]), float(value[1])
    except (TypeError, ValueError):
        return None
    return (min(s, e), max(s, e))


def predicted_span(text: str) -> Span | None:
    """The predicted span: EasyVideoR1's JSON `time`, else lmms-eval's free-text `extract_time`."""
    obj = json_answer(text)
    if obj is not None and (span := span_of(obj.get("time"))) is not None:
        return span
    found = extract_time(text)
    return found[0] if found else None


def temporal_iou(a: Span | None, b: Span | None) -> float:
    """1-D IoU; 0 when either span is missing or the union is empty."""
    if a is None or b is None:
        return 0.0
    union = max(a[1], b[1]) - min(a[0], b[0])
    if union <= 0:
        return 0.0
    return max(0.0, min(a[1], b[1]) - max(a[0], b[0])) / union


def box_iou(a: Sequence[float], b: Sequence[float]) -> float:
    """2-D IoU of [x1, y1, x2, y2] boxes (negative extents clamp to 0); 0 for a malformed box."""
    try:
        ax1, ay1, ax2, ay2 = map(float, a)
        bx1, by1, bx2, by2 = map(float, b)
    except (TypeError, ValueError):
        return 0.0
    inter = max(0.0, min(ax2, bx2) - max(ax1, bx1)) * max(0.0, min(ay2, by2) - max(ay1, by1))
    area = max(0.0, ax2 - ax1) * max(0.0, ay2 - ay1) + max(0.0, bx2 - bx1) * max(0.0, by2 - by1) - inter
    return inter / area if area > 0 else 0.0


def _second(key: Any) -> str | None:
    try:
        return str(int(float(key)))
    except (TypeError, ValueError):
        return None


def boxes_of(value: Any) -> dict[str, Any]:
    """{"<integer second>": box} from a `boxes` dict (keys "18", "18.0" or 18 all become "18")."""
    if not isinstance(value, Mapping):
        return {}
    return {k: v for key, v in value.items() if (k := _second(key)) is not None}


def mean_box_iou(pred: Mapping[str, Any], gt: Mapping[str, Any]) -> float:
    """Mean box IoU over the seconds present in both; 0 when none is common."""
    common = [k for k in gt if k in pred]
    return sum(box_iou(pred[k], gt[k]) for k in common) / len(common) if common else 0.0
