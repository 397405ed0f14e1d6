"""EasyVideoR1's per-item scorer `reward_fn` (spec §5.4, eval-benchmarks §2.0 E2), bugs kept.

The output and the item's `solution` both go through `extract_answer` (so Charades-STA's
`<think>{json}</think><[PLHD…]>` ground truth is read by the grounding rules); an empty extraction
of the *output* is replaced by the raw output. Then, by problem type:

| type | score |
| --- | --- |
| multiple choice | 1 if the trimmed strings are equal |
| numerical | 0 unless both or neither contain "." or ","; then `normalize_number` both, equal at 2 dp |
| regression | MRA: float32, strict "<", thresholds 0.50…0.95, rel = \\|p−g\\|/(\\|g\\|+1e-8) |
| REC | all digit runs of the prediction, concatenated, equal the GT's (non-empty) |
| SSR, CRR | GT YES iff `ovo_type` == 1; upper-cased prediction == "Y"/"N" or contains the GT word |
| temporal grounding | JSON on both sides, 1-D IoU of `time` (reversed interval → 0); also `iou` |
| spatial-temporal grounding | 0.5·tIoU + 0.5·mean box IoU over the prediction's keys present in the GT; tIoU alone without GT boxes |
| anything else (open-ended, OCR, free-form, caption) | 0 |

The reference swallowed every exception as 0; here each parse failure it could meet is handled where
it happens, with the same result.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from evr1.eval.easyvideor1.extract import extract_answer

# torch.arange(0.5, 0.95 + 0.025, 0.05, dtype=float32) as the reference computes it: start + i·step in
# double, then rounded to float32 (numpy's float32 arange accumulates and is off by 1–2 ulp from 0.65).
THRESHOLDS = (0.5 + np.arange(10) * 0.05).astype(np.float32)

TypeScorer = Callable[[str, str, Mapping[str, Any]], float]  # (prediction, GT answer, item) → score


def normalize_number(text: str) -> float | None:
    """Strip leading non-[digit, sign, "."] and trailing non-[digit, "."] characters, drop commas,
    parse: "about 12.5" → 12.5; "3.5 meters." → None (the trailing "." survives the strip)."""
    cleaned = re.sub(r"^[^\d\-+.]*", "", text.strip())
    cleaned = re.sub(r"[^\d.]*$", "", cleaned)
    try:
        return float(cleaned.replace(",", ""))
    except ValueError:
        return None


def mean_relative_accuracy(pred: float, gt: float) -> float:
    """Share of the 10 thresholds t with |p−g|/(|g|+1e-8) < 1−t, all in float32 (the reference's torch)."""
    with np.errstate(all="ignore"):
        p, g = np.float32(pred), np.float32(gt)
        rel = np.abs(p - g) / (np.abs(g) + np.float32(1e-8))
        hits = np.count_nonzero(rel < (np.float32(1.0) - THRESHOLDS))
    return float(np.float32(hits) / np.float32(len(THRESHOLDS)))


def _numbers(value: Any, n: int) -> list[float] | None:
    """`value` as a list of exactly `n` floats (strings like "12" count, as `float()` takes them)."""
    if not isinstance(value, list) or len(value) != n:
        return None
    try:
        return [float(v) for v in value]
    except (TypeError, ValueError, OverflowError):
        return None


def iou_1d(pred: Any, gt: Any) -> float:
    p, g = _numbers(pred, 2), _numbers(gt, 2)
    if p is None or g is None:
        return 0.0
    (s1, e1), (s2, e2) = p, g
    inter = max(0.0, min(e1, e2) - max(s1, s2))
    union = max(e1, e2) - min(s1, s2)
    return inter / union if union > 1e-12 else 0.0


def iou_2d(pred: Any, gt: Any) -> float:
    p, g = _numbers(pred, 4), _numbers(gt, 4)
    if p is None or g is None:
        return 0.0
    (x1, y1, x2, y2), (X1, Y1, X2, Y2) = p, g
    inter = max(0.0, min(x2, X2) - max(x1, X1)) * max(0.0, min(y2, Y2) - max(y1, Y1))
    union = max(0.0, x2 - x1) * max(0.0, y2 - y1) + max(0.0, X2 - X1) * max(0.0, Y2 - Y1) - inter
    return inter / union if union > 1e-12 else 0.0


def _json_object(text: str) -> dict | None:
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


def _multiple_choice(pred: str, gt: str, item: Mapping[str, Any]) -> float:
    return 1.0 if pred.strip() == gt.strip() else 0.0


def _has_mark(text: str) -> bool:
    return "." in text or "," in text


def _numerical(pred: str, gt: str, item: Mapping[str, Any]) -> float:
    if _has_mark(pred) != _has_mark(gt):
        return 0.0
    p, g = normalize_number(pred), normalize_number(gt)
    if p is None or g is None:
        return 0.0
    return 1.0 if round(p, 2) == round(g, 2) else 0.0


def _regression(pred: str, gt: str, item: Mapping[str, Any]) -> float:
    p, g = normalize_number(pred), normalize_number(gt)
    if p is None or g is None:
        return 0.0
    return mean_relative_accuracy(p, g)


def _digits(text: str) -> str:
    return "".join(re.findall(r"\d+", text))


def _counting(pred: str, gt: str, item: Mapping[str, Any]) -> float:
    want = _digits(gt)
    return 1.0 if want and _digits(pred) == want else 0.0


def yes_no_truth(item: Mapping[str, Any], gt: str) -> str:
    """"YES" if `ovo_type` is 1, "NO" otherwise; without `ovo_type`, from the solution's answer.
    (Gap: the spec says only "or derived from the solution text"; we take a leading Y as YES.)"""
    kind = item.get("ovo_type")
    if kind is not None and str(kind).strip() != "":
        return "YES" if str(kind).strip() in ("1", "1.0", "True") else "NO"
    return "YES" if gt.strip().upper().startswith("Y") else "NO"


def _yes_no(pred: str, gt: str, item: Mapping[str, Any]) -> float:
    want = yes_no_truth(item, gt)
    got = pred.strip().upper()
    if (got == "Y" and want == "YES") or (got == "N" and want == "NO") or want in got:
        return 1.0
    return 0.0


def _temporal(pred: str, gt: str, item: Mapping[str, Any]) -> float:
    p, g = _json_object(pred), _json_object(gt)
    if p is None or g is None:
        return 0.0
    return iou_1d(p.get("time"), g.get("time"))


def _spatio_temporal(pred: str, gt: str, item: Mapping[str, Any]) -> float:
    p, g = _json_object(pred), _json_object(gt)
    if p is None or g is None:
        return 0.0
    tiou = iou_1d(p.get("time"), g.get("time"))
    gboxes, pboxes = g.get("boxes"), p.get("boxes")
    if not isinstance(gboxes, dict) or not gboxes:
        return tiou
    common = [k for k in pboxes if k in gboxes] if isinstance(pboxes, dict) else []
    miou = sum(iou_2d(pboxes[k], gboxes[k]) for k in common) / len(common) if common else 0.0
    return 0.5 * tiou + 0.5 * miou


SCORERS: dict[str, TypeScorer] = {
    "multiple choice": _multiple_choice,
    "numerical": _numerical,
    "regression": _regression,
    "REC": _counting,
    "SSR": _yes_no,
    "CRR": _yes_no,
    "temporal grounding": _temporal,
    "spatial-temporal grounding": _spatio_temporal,
}
ALSO_AS: dict[str, str] = {"temporal grounding": "iou"}  # extra result keys carrying the score


def solution_of(item: Mapping[str, Any]) -> str:
    """The record's `solution` (what the reference extracts the GT from), else the item's `gt` in tags."""
    sol = item.get("solution")
    return str(sol) if sol is not None else f"<answer>{item.get('gt', '')}</answer>"


def problem_type(item: Mapping[str, Any]) -> str:
    """The item's type as the canonical item has it (lower-case; REC/SSR/CRR upper-case)."""
    ptype = str(item.get("problem_type") or "").strip()
    return ptype.upper() if ptype.upper() in ("REC", "SSR", "CRR") else ptype.lower()


def score(output: str, item: Mapping[str, Any]) -> dict[str, Any]:
    """EasyVideoR1's reward for `output` on `item`: {"score", "pred"} (+ "iou" for temporal grounding).

    `pred` is what the reference logs as `prediction`: the extraction, or the raw output if empty.
    The raw output is scored, reasoning included (the reference strips nothing before extracting).
    """
    ptype = problem_type(item)
    text = output or ""
    pred = extract_answer(text, ptype) or text
    gt = extract_answer(solution_of(item), ptype)
    rule = SCORERS.get(ptype)
    value = float(rule(pred, gt, item)) if rule else 0.0
    result: dict[str, Any] = {"score": value, "pred": pred}
    if ptype in ALSO_AS:
        result[ALSO_AS[ptype]] = value
    return result
