"""MVBench (EasyVideoR1's file: 3586 MC items over 18 of the 20 tasks), per-task accuracy and their mean.

Official protocol (OpenGVLab/Ask-Anything `video_chat2/mvbench.ipynb`, VLMEvalKit `MVBench`): the
system instruction below, "Question: …\nOptions:\n(A) …\n" + "Only give the best option.", an
assistant prefill "Best option:(", and `check_ans` on the first token (`evr1.eval.extractors.mvbench`).
Official metric: accuracy per task and the mean over tasks (tasks have 200 items each officially).

Official release read by `official_format`: the folder `json/` of OpenGVLab/MVBench with one file
`<task>.json` per task (e.g. `action_antonym.json`), each a list of {"video", "question",
"candidates" (option texts), "answer" (the right option's text), optional "start"/"end" seconds};
videos lie under the task's folder in the release (`star/Charades_v1_480/`, `clevrer/video_validation/`, …).

Task of an item in EasyVideoR1's file: its `problem_id` is 1 + 200·k + (index within task k), with k
the task's position in the alphabetical list of the 20 official task files (checked against each
task's video folder over the whole file in the tests); absent tasks are fine_grained_pose (k=10) and
episodic_reasoning (k=8). An item with its own `task` field (the official loader sets it) keeps it.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from evr1.eval.benchmark import Benchmark, PromptContext, register_benchmark
from evr1.eval.extractors.derive import with_fields
from evr1.eval.extractors.mvbench import check_ans
from evr1.eval.formats import read_table, task_files
from evr1.eval.items import LETTERS, ItemError
from evr1.eval.metrics import macro
from evr1.eval.prompting import finish, options_block, question

# task file stem → video folder in the official release (the notebook's `data_list`), alphabetical
TASKS: dict[str, str] = {
    "action_antonym": "ssv2_video/", "action_count": "perception/videos/",
    "action_localization": "sta/sta_video/", "action_prediction": "star/Charades_v1_480/",
    "action_sequence": "star/Charades_v1_480/", "character_order": "perception/videos/",
    "counterfactual_inference": "clevrer/video_validation/", "egocentric_navigation": "vlnqa/",
    "episodic_reasoning": "tvqa/frames_fps3_hq/", "fine_grained_action": "Moments_in_Time_Raw/videos/",
    "fine_grained_pose": "nturgbd/", "moving_attribute": "clevrer/video_validation/",
    "moving_count": "clevrer/video_validation/", "moving_direction": "clevrer/video_validation/",
    "object_existence": "clevrer/video_validation/", "object_interaction": "star/Charades_v1_480/",
    "object_shuffle": "perception/videos/", "scene_transition": "scene_qa/video/",
    "state_change": "perception/videos/", "unexpected_action": "FunQA_test/test/",
}
TASK_SIZE = 200

SYSTEM = ("Carefully watch the video and pay attention to the cause and sequence of events, the detail and "
          "movement of objects, and the action and pose of persons. Based on your observations, select the "
          "best option that accurately addresses the question.")


def task_of(item: Mapping[str, Any]) -> str:
    """The item's task: its own `task` field, else its `problem_id` block (module docstring)."""
    if item.get("task"):
        return str(item["task"])
    try:
        k = (int(item["problem_id"]) - 1) // TASK_SIZE
    except (KeyError, TypeError, ValueError):
        return "unknown"
    names = list(TASKS)
    return names[k] if 0 <= k < len(names) else "unknown"


def prompt(item: Mapping[str, Any], ctx: PromptContext) -> str:
    return finish(f"{SYSTEM}\nQuestion: {question(item)}\nOptions:\n{options_block(item, '({letter}) {text}')}\n"
                  "Only give the best option.", ctx)


def score(output: str, item: Mapping[str, Any]) -> dict[str, Any]:
    ok = check_ans(output, item["gt"])
    return {"score": 1.0 if ok else 0.0, "pred": (output or "").strip().split(" ")[0]}


def oracle(item: Mapping[str, Any]) -> str:
    text = item["option_texts"][item["letters"].index(item["gt"])]
    return f"({item['gt']}) {text}"


def official_format(path: Path) -> list[dict]:
    """The release's `json/<task>.json` files (a folder, or one task file) → shared-schema records."""
    out: list[dict] = []
    for f in task_files(path):
        task = f.stem
        if task not in TASKS:
            raise ItemError(f"mvbench: {f} is not one of the 20 task files ({', '.join(TASKS)})")
        for n, row in enumerate(read_table(f)):
            cands = [str(c) for c in row["candidates"]]
            if row["answer"] not in cands:
                raise ItemError(f"mvbench {task} record {n}: field 'answer' {row['answer']!r} is not among 'candidates'")
            extra = {k: row[k] for k in ("start", "end") if row.get(k) is not None}
            out.append({"problem_id": 1 + TASK_SIZE * list(TASKS).index(task) + n, "task": task,
                        "problem": row["question"], "question": row["question"], "problem_type": "multiple choice",
                        "options": [f"{LETTERS[i]}. {c}" for i, c in enumerate(cands)], "answer": row["answer"],
                        "solution": f"<answer>{LETTERS[cands.index(row['answer'])]}</answer>",
                        "path": TASKS[task] + str(row["video"]), "video_file": row["video"], **extra})
    return out


MVBENCH = register_benchmark(Benchmark(
    name="mvbench", title="MVBench", files=("mvbench.json",), video_root="MVBench",
    prompt=prompt, score=score, aggregate=with_fields(macro("task", metric="task-mean"), task=task_of),
    official_format=official_format, expected_items=3586, group_key=task_of, reference="mvbench", oracle=oracle,
    # The star and sta items' start/end seconds: frames are sampled from that clip, as the official
    # protocol does (EasyVideoR1, and so its profile, gives the whole video).
    extra={"segments": True},
    deviations=(
        "An empty prediction (or a first token with no letter) is wrong; the official check_ans counts it as correct.",
        "No assistant prefill 'Best option:(' (the prompt is one user turn, the system text leads it); check_ans "
        "reads '(C) …', 'C) …', 'C.' and 'C' alike.",
        "EasyVideoR1's file holds 18 tasks (no fine_grained_pose, no episodic_reasoning); the mean is over the "
        "tasks present.",
    ),
))
