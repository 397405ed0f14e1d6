"""LVBench (EasyVideoR1's file: 1492 MC items, 4 options, 99 videos), accuracy.

Official protocol as run by lmms-eval (`lvbench`): "{question}\n(A) …\n(B) …\nAnswer the question with
the option letter."; extraction lmms-eval's L1 (`evr1.eval.extractors.lmms.mcq_extract`) over
A–D, as lmms-eval passes them; accuracy, with breakdowns by video type and question type where the
item has them.

Official release read by `official_format`: `video_info.meta.jsonl` (zai-org/LVBench), one line per
video: {"key" (video id), "type" (video category), "qa": [{"uid", "question" (the stem, then one line
per option "(A) …"), "answer" (letter), "question_type" (list of categories), "time_reference"}]};
videos `videos/<key>.mp4`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from evr1.eval.benchmark import Benchmark, PromptContext, register_benchmark
from evr1.eval.benchmarks.mvbench import SYSTEM as MVBENCH_INSTRUCTION
from evr1.eval.extractors.lmms import mcq_extract
from evr1.eval.formats import read_table
from evr1.eval.items import ItemError
from evr1.eval.metrics import accuracy
from evr1.eval.prompting import finish, options_block, question
from evr1.eval.scoring import multiple_choice

_OPTION_LINE = re.compile(r"^\s*\(?([A-Z])[.):]\s*(.*)$")


def split_question(text: str, *, where: str) -> tuple[str, list[str]]:
    """A question with its options on their own lines ("(A) x", "A. x", "A: x") → (stem, ["A. x", …])."""
    stem, options = [], []
    for line in str(text).splitlines():
        m = _OPTION_LINE.match(line)
        if m and (options or stem):
            options.append(f"{m.group(1)}. {m.group(2).strip()}")
        elif options:
            options[-1] += " " + line.strip()
        else:
            stem.append(line)
    if not options:
        raise ItemError(f"{where}: field 'question' holds no option lines")
    return "\n".join(stem).strip(), options


def prompt(item: Mapping[str, Any], ctx: PromptContext) -> str:
    """lmms-eval's prompt; for the qwen25 family the one Qwen's maintainers gave for Qwen2.5-VL's
    official LVBench numbers (QwenLM/Qwen3-VL#715): MVBench's instruction, then the letter request."""
    if ctx.family == "qwen25":
        return finish(f"{MVBENCH_INSTRUCTION}\nQuestion: {question(item)}\nOptions:\n"
                      f"{options_block(item, '({letter}) {text}')}\n"
                      "Answer with the option's letter from the given choices directly.", ctx)
    return finish(f"{question(item)}\n{options_block(item, '({letter}) {text}')}\n"
                  "Answer the question with the option letter.", ctx)


def official_format(path: Path) -> list[dict]:
    out: list[dict] = []
    for video in read_table(path):
        for qa in video["qa"]:
            where = f"lvbench record {qa.get('uid')!r}"
            stem, options = split_question(qa["question"], where=where)
            qtype = qa.get("question_type")
            out.append({"problem_id": qa["uid"], "problem": stem, "problem_type": "multiple choice", "options": options,
                        "solution": f"<answer>{qa['answer']}</answer>", "path": f"videos/{video['key']}.mp4",
                        "video_type": video.get("type"),
                        "question_type": ", ".join(qtype) if isinstance(qtype, list) else qtype,
                        "time_reference": qa.get("time_reference")})
    return out


LVBENCH = register_benchmark(Benchmark(
    name="lvbench", title="LVBench", files=("lvbench.json",), video_root="LVBench", prompt=prompt,
    score=multiple_choice(lambda text, item: mcq_extract(text, "ABCD")),
    aggregate=accuracy("video_type", "question_type"), official_format=official_format, expected_items=1492,
    reference="lvbench",
    deviations=(),  # L1 with A–D exactly as lmms-eval runs it; an empty read is `undecided` (wrong there too)
))
