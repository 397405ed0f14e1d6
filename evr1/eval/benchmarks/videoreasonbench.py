"""VideoReasonBench (1440 open-ended items, 240 in each of six scenes: card, chip, cup, file_sys, grid, hrd).

Official protocol (llyx97/video_reason_bench, a VLMEvalKit fork, 64 frames): the question as given,
which already ends "Provide a summary of the final answer after 'Final Answer:'"; a GPT-4o judge
compares the summary with the answer; judged accuracy. Here: the text after the last "Final Answer:"
is compared with the ground truth after normalisation (case, whitespace, edge punctuation); equal → 1,
else the item waits for the LLM judge pass (`needs_judge`). Accuracy, broken down by scene (the
first folder of the video path).

Official release read by `official_format`: rows with `video` ("card/state1_op5_start.mp4"),
`question`, `answer`, optional `id`.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from evr1.eval.benchmark import Benchmark, PromptContext, register_benchmark
from evr1.eval.extractors.derive import with_fields
from evr1.eval.extractors.open_ended import needs_judge, open_ended
from evr1.eval.formats import read_table
from evr1.eval.metrics import accuracy
from evr1.eval.prompting import finish, question

_ASK = "Provide a summary of the final answer after 'Final Answer:'"


def scene(item: Mapping[str, Any]) -> str:
    parts = str(item.get("video") or "").split("/")
    return parts[0] if len(parts) > 1 else "unknown"


def prompt(item: Mapping[str, Any], ctx: PromptContext) -> str:
    q = question(item)
    return finish(q if _ASK.lower() in q.lower() else f"{q}\n\n{_ASK}", ctx)


def official_format(path: Path) -> list[dict]:
    return [{"problem_id": r.get("id", i + 1), "problem": r["question"], "problem_type": "open-ended", "options": [],
             "solution": f"<answer>{r['answer']}</answer>", "path": r["video"]} for i, r in enumerate(read_table(path))]


VIDEOREASONBENCH = register_benchmark(Benchmark(
    name="videoreasonbench", title="VideoReasonBench", files=("videoreasonbench.json",),
    video_root="VideoReasonBench/videos", prompt=prompt, score=open_ended,
    aggregate=with_fields(accuracy("scene"), scene=scene), official_format=official_format, expected_items=1440,
    needs_judge=needs_judge, group_key=scene, reference="videoreasonbench",
    oracle=lambda item: f"Final Answer: {item['gt']}",
    deviations=("The GPT-4o judge is replaced by normalised exact match of the final answer, the rest waiting for "
                "the LLM judge pass (needs_judge).",),
))
