"""Video-MME (2700 MC items, 900 each short / medium / long), with optional subtitles.

Official protocol (QwenLM/Qwen3-VL `evaluation/VideoMME`): the prompt below; the text after the last
`</think>`; VLMEvalKit's rule stage (V1); what it cannot read is `undecided` and goes to the judge.
Accuracy, broken down by duration, domain and task type.
Official release: `videomme/test-*.parquet` (or its JSON) with `videoID`, `question`, `options`,
`answer`, `duration`, `domain`, `sub_category`, `task_type`; subtitles `subtitle/<videoID>.srt`.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from evr1.eval.benchmark import Benchmark, PromptContext, register_benchmark
from evr1.eval.extractors.vlmevalkit import infer
from evr1.eval.formats import read_table
from evr1.eval.metrics import accuracy
from evr1.eval.prompting import finish, letters_phrase, options_block, question
from evr1.eval.scoring import multiple_choice
from evr1.eval.subtitles import srt_text


def prompt(item: Mapping[str, Any], ctx: PromptContext) -> str:
    return finish(
        "Select the best answer to the following multiple-choice question based on the video. "
        f"Respond with only the letter ({letters_phrase(item)}) of the correct option.\n"
        f"Question: {question(item)}\n{options_block(item)}\nThe best answer is:", ctx)


def official_format(path: Path) -> list[dict]:
    """Rows of the official release → records in the shared schema."""
    return [{**row, "problem_id": row["question_id"], "problem": row["question"], "problem_type": "multiple choice",
             "options": list(row["options"]), "solution": f"<answer>{row['answer']}</answer>",
             "path": f"videos/{row['videoID']}.mp4"} for row in read_table(path)]


def subtitles(item: Mapping[str, Any], root: Path) -> str | None:
    vid = item.get("videoID") or Path(item["video"]).stem
    return srt_text(root / "subtitle" / f"{vid}.srt")


VIDEOMME = register_benchmark(Benchmark(
    name="videomme", title="Video-MME", files=("videomme.json",), video_root="Video-MME",
    prompt=prompt, score=multiple_choice(lambda text, item: infer(text, item["letters"], item["option_texts"])),
    aggregate=accuracy("duration", "domain", "task_type"), official_format=official_format, expected_items=2700,
    subtitles=subtitles, reference="videomme",
    deviations=("An answer the rule stage cannot read ('<answer>D</answer>', 'I think A is correct here') is "
                "`undecided`: the configured LLM judge decides it when eval.judge.enabled (the official pipeline asks "
                "gpt-3.5-turbo-0125 to map it to a letter, random after 25 failures); with the judge off it is wrong.",),
))
