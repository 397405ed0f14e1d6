"""VSI-Bench (5130 items: 2490 multiple choice with 2–4 options, 2640 numeric; 10 raw task types).

Official protocol (`vision-x-nyu/thinking-in-space`, also lmms-eval / VLMEvalKit `vsibench`): "These
are frames of a video.\\n{question}\\n" + for multiple choice "Options:\\n{A. …}\\nAnswer with the
option's letter from the given choices directly.", for numeric "Please answer the question using a
single word or phrase.". Scoring (`evr1.eval.extractors.vsibench`): the first token of the answer;
multiple choice by case-insensitive equality with the letter, numeric by MRA with ≤ over the 10
official thresholds (the official parser, `float` of the first token, not lmms-eval's later
number-word parser). Overall = mean of 8 task scores: obj_appearance_order, object_abs_distance,
object_counting, object_rel_distance, object_size_estimation, room_size_estimation, route_planning
(accuracy or MRA) and object_rel_direction (mean of the easy, medium and hard accuracies).

Official release read by `official_format`: `test.parquet` / JSON rows with `id`, `dataset`
(arkitscenes / scannet / scannetpp), `scene_name`, `question_type` (the 10 raw task names), `question`,
`options` ("A. …"; null for numeric), `ground_truth` (a letter, or a number); videos
`<dataset>/<scene_name>.mp4`.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from evr1.eval.benchmark import Benchmark, PromptContext, register_benchmark
from evr1.eval.extractors.vsibench import first_token, mra, to_float
from evr1.eval.formats import read_table
from evr1.eval.metrics import task_mean
from evr1.eval.prompting import finish, options_block, question
from evr1.eval.scoring import by_type

TASKS = {
    "obj_appearance_order": ("obj_appearance_order",),
    "object_abs_distance": ("object_abs_distance",),
    "object_counting": ("object_counting",),
    "object_rel_distance": ("object_rel_distance",),
    "object_size_estimation": ("object_size_estimation",),
    "room_size_estimation": ("room_size_estimation",),
    "route_planning": ("route_planning",),
    "object_rel_direction": ("object_rel_direction_easy", "object_rel_direction_medium", "object_rel_direction_hard"),
}


def prompt(item: Mapping[str, Any], ctx: PromptContext) -> str:
    if item["problem_type"] == "multiple choice":
        tail = f"Options:\n{options_block(item)}\nAnswer with the option's letter from the given choices directly."
    else:
        tail = "Please answer the question using a single word or phrase."
    return finish(f"These are frames of a video.\n{question(item)}\n{tail}", ctx)


def multiple_choice(output: str, item: Mapping[str, Any]) -> dict[str, Any]:
    pred = first_token(output)
    return {"score": 1.0 if pred and pred.lower() == str(item["gt"]).lower() else 0.0, "pred": pred}


def numeric(output: str, item: Mapping[str, Any]) -> dict[str, Any]:
    pred, gt = to_float(first_token(output)), to_float(str(item["gt"]))
    if gt is None:
        raise ValueError(f"vsibench record {item.get('id')!r}: field 'solution' is not a number: {item['gt']!r}")
    return {"score": 0.0 if pred is None else mra(pred, gt), "pred": pred}


def official_format(path: Path) -> list[dict]:
    out = []
    for row in read_table(path):
        opts = row.get("options")
        out.append({"problem_id": row["id"], "problem": row["question"],
                    "problem_type": "multiple choice" if opts else "regression", "options": list(opts) if opts else None,
                    "original_question_type": row["question_type"], "solution": f"<answer>{row['ground_truth']}</answer>",
                    "path": f"{row['dataset']}/{row['scene_name']}.mp4"})
    return out


VSIBENCH = register_benchmark(Benchmark(
    name="vsibench", title="VSI-Bench", files=("vsibench.json",), video_root="VSI-Bench", prompt=prompt,
    score=by_type({"multiple choice": multiple_choice, "regression": numeric}, benchmark="vsibench"),
    aggregate=task_mean("original_question_type", TASKS), official_format=official_format, expected_items=5130,
    group_key=lambda item: str(item.get("original_question_type", "unknown")), reference="vsibench",
    deviations=(
        "The first token is split on any whitespace (the official split(' ') keeps '3.5\\nmeters' as one token).",
        "A ground truth of 0 scores 1 only for a prediction of 0 (the official MRA divides by zero).",
    ),
))
