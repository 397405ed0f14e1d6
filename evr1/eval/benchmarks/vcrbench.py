"""VCR-Bench (1034 items: 510 multiple choice with 3–5 options, 524 open-ended).

Official protocol (VLMEvalKit `VCRBench`): the video frames + "Question: {q}\\nAnswer: " (the options
listed after the question for multiple choice); GPT-4o extracts the answer and GPT-4o grades it;
accuracy over all items (the CoT-quality score needs reference reasoning steps and a judge: not
computed). Here: multiple choice by VLMEvalKit's rule stage (V1) on the final answer; open-ended by
normalised exact match, the rest left to the LLM judge pass (`needs_judge`). Accuracy, broken down by
question type and by the source dataset (the first folder under `video/` in the path).

Official release read by `official_format`: rows with `id`, `video_path`, `question`,
`multiple-choice` (bool), `choices` ({"A": …} or a list of texts; multiple choice only), `answer` (a
letter, or the answer text), `dimension` (optional).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from evr1.eval.benchmark import Benchmark, PromptContext, register_benchmark
from evr1.eval.extractors.derive import with_fields
from evr1.eval.extractors.open_ended import choice, needs_judge, open_ended
from evr1.eval.formats import read_table
from evr1.eval.items import option_text
from evr1.eval.metrics import accuracy
from evr1.eval.prompting import finish, options_block, question
from evr1.eval.scoring import by_type


def source(item: Mapping[str, Any]) -> str:
    """The source dataset folder: "video/videoEspresso/x.mp4" → "videoEspresso"."""
    parts = str(item.get("video") or "").split("/")
    return parts[1] if len(parts) > 2 and parts[0] == "video" else "unknown"


def prompt(item: Mapping[str, Any], ctx: PromptContext) -> str:
    opts = f"\n{options_block(item)}" if item["problem_type"] == "multiple choice" else ""
    return finish(f"Question: {question(item)}{opts}\nAnswer: ", ctx)


def _options(choices: Any) -> list[str]:
    if isinstance(choices, Mapping):
        return [f"{k}. {v}" for k, v in sorted(choices.items()) if v]
    return [f"{chr(65 + i)}. {option_text(str(c))}" for i, c in enumerate(choices or [])]


def official_format(path: Path) -> list[dict]:
    out = []
    for row in read_table(path):
        mc = bool(row.get("multiple-choice"))
        rec = {"problem_id": row["id"], "problem": row["question"], "problem_type": "multiple choice" if mc else "open-ended",
               "options": _options(row.get("choices")) if mc else [], "solution": f"<answer>{row['answer']}</answer>",
               "path": row["video_path"]}
        if row.get("dimension"):
            rec["dimension"] = row["dimension"]
        out.append(rec)
    return out


VCRBENCH = register_benchmark(Benchmark(
    name="vcrbench", title="VCR-Bench", files=("vcrbench.json",), video_root="VCR-Bench/v1/videos", prompt=prompt,
    score=by_type({"multiple choice": choice, "open-ended": open_ended}, benchmark="vcrbench"),
    aggregate=with_fields(accuracy("problem_type", "source", "dimension"), source=source),
    official_format=official_format, expected_items=1034, needs_judge=needs_judge, reference="vcrbench",
    oracle=lambda item: str(item["gt"]),
    deviations=(
        "No GPT-4o answer extraction: multiple choice is read by VLMEvalKit's rule stage (V1) on the final answer.",
        "Open-ended: normalised exact match scores 1; the rest waits for the LLM judge pass (needs_judge), which "
        "replaces GPT-4o. No CoT-quality score.",
    ),
))
