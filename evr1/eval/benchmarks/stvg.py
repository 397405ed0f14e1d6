"""STVG (ST-Align-Benchmark: 2000 spatio-temporal grounding queries; a time span and one box per
integer second, about 9.8 boxes per query; 71 queries have no boxes).

Protocol (EasyVideoR1 only; no other reference exists): the answer is JSON `{"time": [s, e], "boxes":
{"<second>": [x1, y1, x2, y2], …}}` (in `<answer>` or bare; free-text times are read as for
Charades-STA, with no boxes). Score = 0.5·tIoU + 0.5·box mIoU, the box mIoU being the mean box IoU
over the seconds present in both the prediction and the ground truth (0 if none); tIoU alone when
the ground truth has no boxes. Reported: the mean score (headline), mean tIoU over all queries and
mean box mIoU over the queries with boxes. Box coordinates are compared as given (the ground truth is
in the source video's pixels).

Official release read by `official_format`: JSON rows with `video`, `question` (or `caption`),
`time` [s, e] and `boxes` {second: box}.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from evr1.eval.benchmark import Benchmark, PromptContext, Report, register_benchmark
from evr1.eval.extractors.grounding import (boxes_of, extract_time, json_answer, mean_box_iou, span_of,
                                            temporal_iou)
from evr1.eval.formats import read_table
from evr1.eval.metrics import value
from evr1.eval.prompting import finish, question

FORMAT = ('Provide the time span in seconds and the bounding boxes as a JSON object inside <answer> </answer> tags. '
          'Format: {"time": [start, end], "boxes": {"second": [x1, y1, x2, y2], ...}}. '
          'Output one bounding box for every integer second within the time span (inclusive).')


def ground_truth(item: Mapping[str, Any]) -> tuple[tuple[float, float], dict[str, Any]]:
    try:
        obj = json.loads(item["gt"])
        span = span_of(obj["time"])
    except (json.JSONDecodeError, KeyError, TypeError):
        span = None
    if span is None:
        raise ValueError(f"stvg record {item.get('id')!r}: field 'solution' holds no {{\"time\": [s, e], \"boxes\": …}}")
    return span, boxes_of(obj.get("boxes"))


def prompt(item: Mapping[str, Any], ctx: PromptContext) -> str:
    return finish(f"Answer the following question based on the video.\nQuestion: {question(item)}\n{FORMAT}", ctx)


def score(output: str, item: Mapping[str, Any]) -> dict[str, Any]:
    gt_span, gt_boxes = ground_truth(item)
    obj = json_answer(output) or {}
    span = span_of(obj.get("time"))
    if span is None and not obj:
        found = extract_time(output)
        span = found[0] if found else None
    tiou = temporal_iou(span, gt_span)
    if not gt_boxes:
        return {"score": tiou, "tiou": tiou, "box_miou": None, "pred": list(span) if span else None}
    miou = mean_box_iou(boxes_of(obj.get("boxes")), gt_boxes)
    return {"score": 0.5 * tiou + 0.5 * miou, "tiou": tiou, "box_miou": miou, "pred": list(span) if span else None}


def aggregate(pairs) -> Report:
    scores = [value(r) for _, r in pairs]
    tious = [value(r, "tiou") for _, r in pairs]
    boxed = [value(r, "box_miou") for i, r in pairs if ground_truth(i)[1]]
    mean = lambda xs: sum(xs) / len(xs) if xs else 0.0
    return Report("score", mean(scores), {"tiou": mean(tious), "box_miou": mean(boxed)},
                  {"items": len(pairs), "box_miou": len(boxed)})


def oracle(item: Mapping[str, Any]) -> str:
    span, boxes = ground_truth(item)
    return f"<answer>{json.dumps({'time': list(span), 'boxes': boxes})}</answer>"


def official_format(path: Path) -> list[dict]:
    return [{"problem_id": r.get("id", i), "problem": r.get("question") or r["caption"],
             "problem_type": "spatial-temporal grounding", "options": [], "path": r["video"],
             "solution": f"<answer>{json.dumps({'time': r['time'], 'boxes': r.get('boxes') or {}})}</answer>"}
            for i, r in enumerate(read_table(path))]


STVG = register_benchmark(Benchmark(
    name="stvg", title="STVG (ST-Align-Benchmark)", files=("stvg.json",), video_root="ST-Align-Benchmark", prompt=prompt,
    score=score, aggregate=aggregate, official_format=official_format, expected_items=2000,
    group_key=lambda item: "all", reference="stvg", oracle=oracle,
    deviations=(
        "Box keys are read as integer seconds ('18', '18.0' and 18 match); EasyVideoR1 compares the strings.",
        "A reversed span is swapped; with no JSON answer, a free-text span is read (no boxes), as EasyVideoR1 does.",
    ),
))
