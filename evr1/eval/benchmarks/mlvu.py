"""MLVU multiple-choice splits: `mlvu-test` (alias `mlvu`, 502 items, 6 options, 9 task types) and
`mlvu-dev` (2174 items, 4 options, 7 task types); official metric M-Avg (mean over task types).

Official protocol (JUNJIE99/MLVU `evaluation/choice_bench.py`, VLMEvalKit `MLVU_MCQ`): the system
instruction "Carefully watch this video and pay attention to every detail. …", "Question: …\nOptions:\n
(A) …" and "Only give the best option."; extraction here is lmms-eval's L1 with the item's own six
letters (lmms-eval passes A–D, so "E"/"F" were unreadable: fixed). M-Avg = mean of per-type accuracy.

Official release read by `official_format`: dev `json/<n>_<type>.json` (and the test MC file), lists
of {"video", "question", "candidates" (texts), "answer" (the right text, or its letter),
"question_type"}; videos under `video/`.

Task type of an item (EasyVideoR1's files carry none): an own `task_type`/`question_type` field; else
the video name's prefix where it names one type (`test_surveil_27.mp4` → anomaly_reco, `needle_32.mp4`
→ needle; table `PREFIXES`); else the item's `problem_id` block: the shared files concatenate the
official per-type files in a fixed order (`BLOCKS`, checked against the prefixes over the whole files in
the tests). plotQA and topic_reasoning share their videos (movie101, en_tv, cartoons, …) and dev's
ego videos also carry topic_reasoning questions, so for those only the block decides.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from evr1.eval.benchmark import Benchmark, PromptContext, register_benchmark
from evr1.eval.extractors.derive import with_fields
from evr1.eval.extractors.lmms import mcq_extract
from evr1.eval.formats import read_table, task_files
from evr1.eval.items import LETTERS, ItemError
from evr1.eval.metrics import macro
from evr1.eval.prompting import finish, options_block, question
from evr1.eval.scoring import multiple_choice

SYSTEM = ("Carefully watch this video and pay attention to every detail. Based on your observations, select the "
          "best option that accurately addresses the question.")

PREFIXES: dict[str, dict[str, str]] = {
    "mlvu-test": {"test_surveil": "anomaly_reco", "test_sports": "sportsQA", "test_order": "order",
                  "test_needle": "needleQA", "test_ego": "ego", "test_tutorial": "tutorialQA", "test_count": "count"},
    "mlvu-dev": {"needle": "needle", "surveil": "anomaly_reco", "count": "count", "order": "order"},
}
BLOCKS: dict[str, tuple[tuple[int, int, str], ...]] = {  # (first problem_id, last, type)
    "mlvu-test": ((1, 39, "anomaly_reco"), (40, 75, "sportsQA"), (76, 145, "order"), (146, 205, "needleQA"),
                  (206, 255, "plotQA"), (256, 346, "topic_reasoning"), (347, 399, "ego"), (400, 442, "tutorialQA"),
                  (443, 502, "count")),
    "mlvu-dev": ((1, 355, "needle"), (356, 555, "anomaly_reco"), (556, 761, "count"), (762, 1113, "ego"),
                 (1114, 1652, "plotQA"), (1653, 1915, "topic_reasoning"), (1916, 2174, "order")),
}
TYPES = {split: tuple(t for _, _, t in blocks) for split, blocks in BLOCKS.items()}


def video_prefix(path: str) -> str:
    """'./video/test_surveil_27.mp4' → 'test_surveil'; 'AWA-6.mp4' → 'AWA-'."""
    return re.sub(r"_?\d+$", "", Path(str(path)).stem)


def task_type(split: str):
    def of(item: Mapping[str, Any]) -> str:
        for key in ("task_type", "question_type"):
            if item.get(key):
                return str(item[key])
        hit = PREFIXES[split].get(video_prefix(item.get("video") or item.get("path") or ""))
        if hit:
            return hit
        try:
            pid = int(item["problem_id"])
        except (KeyError, TypeError, ValueError):
            return "unknown"
        return next((t for lo, hi, t in BLOCKS[split] if lo <= pid <= hi), "unknown")

    return of


def prompt(item: Mapping[str, Any], ctx: PromptContext) -> str:
    return finish(f"{SYSTEM}\nQuestion: {question(item)}\nOptions:\n{options_block(item, '({letter}) {text}')}\n"
                  "Only give the best option.", ctx)


def official_format(path: Path) -> list[dict]:
    """The release's MC JSON files (a folder or one file) → shared-schema records."""
    out: list[dict] = []
    for f in task_files(path):
        default_type = re.sub(r"^\d+_", "", f.stem)
        for n, row in enumerate(read_table(f)):
            cands = [str(c) for c in row["candidates"]]
            ans = str(row["answer"])
            if ans in cands:
                letter = LETTERS[cands.index(ans)]
            elif ans in LETTERS[: len(cands)]:
                letter = ans
            else:
                raise ItemError(f"mlvu {f.name} record {n}: field 'answer' {ans!r} is neither a candidate nor its letter")
            out.append({"problem_id": row.get("question_id") or f"{default_type}/{n}", "problem": row["question"],
                        "problem_type": "multiple choice", "options": [f"{LETTERS[i]}. {c}" for i, c in enumerate(cands)],
                        "solution": f"<answer>{letter}</answer>", "path": f"video/{row['video']}",
                        "task_type": row.get("question_type") or default_type, "duration": row.get("duration")})
    return out


def _define(name: str, n: int, aliases: tuple[str, ...] = ()) -> Benchmark:
    of = task_type(name)
    return register_benchmark(Benchmark(
        name=name, title=f"MLVU ({name.split('-')[1]})", files=(f"{name}.json",),
        video_root="MLVU_Test" if name == "mlvu-test" else "MLVU_dev/MLVU_dev", prompt=prompt,
        score=multiple_choice(lambda text, item: mcq_extract(text, item["letters"])),
        aggregate=with_fields(macro("task_type"), task_type=of), official_format=official_format, expected_items=n,
        group_key=of, aliases=aliases, reference=name, extra={"task_types": TYPES[name]},
        deviations=("L1 reads the item's own letters (A–F on the test split); lmms-eval passes A–D, so a right "
                    "answer 'E' read '' there and '(F) the car' read '' too; here E and F.",
                    "No assistant prefill and no judge fallback: an unreadable answer is wrong.",
                    "Headline is M-Avg (EasyVideoR1 reports micro accuracy, kept as the part micro_accuracy)."),
    ))


MLVU_TEST = _define("mlvu-test", 502, aliases=("mlvu",))
MLVU_DEV = _define("mlvu-dev", 2174)
