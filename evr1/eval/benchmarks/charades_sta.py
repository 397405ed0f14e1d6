"""Charades-STA (test: 3720 sentence → [start, end] temporal grounding queries).

Official protocol (lmms-eval `temporal_grounding_charades`, its `eval_tvg.py`): the prompt below; the
span read from free text by `extract_time`; IoU with the ground truth; mIoU (the headline Qwen3-VL
reports) and R@{0.3, 0.5, 0.7} = share of queries with IoU ≥ m. EasyVideoR1's JSON form
`{"time": [s, e]}` (in `<answer>` or bare) is accepted too, so its prompt's answers are read as well.
An unreadable answer has IoU 0 and is `undecided` (lmms-eval counts it as a bad prediction, IoU 0).
The shared file keeps the ground truth in a `<think>{"time": …}</think>` block followed by a stray
placeholder token; `evr1.eval.items` reads it from there.

Official release read by `official_format`: lmms-lab/charades_sta rows (`video` "3MSZA.mp4", `caption`,
`timestamp` [s, e]), or the original `charades_sta_test.txt` lines "3MSZA 24.3 30.4##person turn a
light on.".
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from evr1.eval.benchmark import Benchmark, PromptContext, register_benchmark
from evr1.eval.extractors.grounding import predicted_span, span_of, temporal_iou
from evr1.eval.formats import read_table
from evr1.eval.metrics import grounding
from evr1.eval.prompting import finish, question
from evr1.eval.scoring import undecided

PRE = ("Please find the visual event described by a sentence in the video, determining its starting and ending times. "
       "The format should be: 'The event happens in the start time - end time'. For example, The event 'person turn a "
       "light on' happens in the 24.3 - 30.4 seonds. Now I will give you the textual sentence: ")
POST = "Please return its start time and end time."


def gt_span(item: Mapping[str, Any]) -> tuple[float, float]:
    """The ground-truth span from the item's `gt` (JSON with `time`)."""
    try:
        span = span_of(json.loads(item["gt"])["time"])
    except (json.JSONDecodeError, KeyError, TypeError):
        span = None
    if span is None:
        raise ValueError(f"charades_sta record {item.get('id')!r}: field 'solution' holds no {{\"time\": [s, e]}}: "
                         f"{str(item.get('gt'))[:80]!r}")
    return span


def prompt(item: Mapping[str, Any], ctx: PromptContext) -> str:
    return finish(f"{PRE}{question(item).rstrip('.')}. {POST}", ctx)


def score(output: str, item: Mapping[str, Any]) -> dict[str, Any]:
    pred = predicted_span(output)
    iou = temporal_iou(pred, gt_span(item))
    return {"score": iou, "iou": iou, "pred": list(pred) if pred else None, **undecided(pred is None, judge=False)}


def oracle(item: Mapping[str, Any]) -> str:
    s, e = gt_span(item)
    return f"The event happens in the {s} - {e} seconds."


def _record(i: int, video: str, caption: str, s: float, e: float) -> dict:
    return {"problem_id": i, "problem": caption, "problem_type": "temporal grounding", "options": [],
            "path": video, "solution": f"<answer>{json.dumps({'time': [s, e]})}</answer>"}


def official_format(path: Path) -> list[dict]:
    path = Path(path)
    if path.suffix == ".txt":
        out = []
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip():
                head, caption = line.split("##", 1)
                vid, s, e = head.split()
                out.append(_record(len(out), f"{vid}.mp4", caption.strip(), float(s), float(e)))
        return out
    rows = read_table(path)
    return [_record(i, r["video"], r["caption"], *map(float, r["timestamp"])) for i, r in enumerate(rows)]


CHARADES_STA = register_benchmark(Benchmark(
    name="charades_sta", title="Charades-STA", files=("charades_sta.json",), video_root="Charades_sta/Charades_v1_480",
    prompt=prompt, score=score, aggregate=grounding(), official_format=official_format, expected_items=3720,
    group_key=lambda item: "all", reference="charades_sta", oracle=oracle,
    deviations=(
        "EasyVideoR1's JSON answer is read before lmms-eval's free-text extract_time: '{\"time\": [24.3, 30.4]}' → "
        "(24.3, 30.4), official nothing (IoU 0); a reversed JSON span is swapped like a text one.",
    ),
))
