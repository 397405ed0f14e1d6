"""Video-Holmes (1837 MC items, 6 options), accuracy and the 7 question-type accuracies.

Official protocol (TencentARC/Video-Holmes, VLMEvalKit `Video_Holmes`): the reasoning prompt below,
answer inside `<answer>…</answer>`, the official `extract_option` (`evr1.eval.extractors.holmes`):
an answer without tags is wrong. Accuracy, by question type (SR, IMC, TCI, TA, MHR, PAR, CTI).

Official release read by `official_format`: `test_Video-Holmes.json`, a list of {"video ID",
"Question ID", "Question Type", "Question", "Options" ({"A": text, …}), "Answer" (letter),
"Explanation"}; videos `videos_cropped/<video ID>.mp4`.

Question types: EasyVideoR1's file carries none and they cannot be read reliably from the question
text, so the type breakdown exists only for items with `question_type` (the official format's).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from evr1.eval.benchmark import Benchmark, PromptContext, register_benchmark
from evr1.eval.extractors.holmes import extract_option
from evr1.eval.formats import read_table
from evr1.eval.metrics import accuracy
from evr1.eval.prompting import finish, options_block, question
from evr1.eval.scoring import multiple_choice

QUESTION_TYPES = ("SR", "IMC", "TCI", "TA", "MHR", "PAR", "CTI")


def prompt(item: Mapping[str, Any], ctx: PromptContext) -> str:
    return finish("Based on the given video, reason and answer the single-choice question. Provide your reasoning "
                  "between the <think> and </think> tags, and then give your final answer between the <answer> and "
                  f"</answer> tags. The question is: {question(item)}. The options are:\n{options_block(item)}\n"
                  "Your answer:", ctx)


def official_format(path: Path) -> list[dict]:
    out = []
    for row in read_table(path):
        opts = row["Options"]
        options = [f"{k}. {v}" for k, v in sorted(opts.items())] if isinstance(opts, dict) else list(opts)
        out.append({"problem_id": row["Question ID"], "problem": row["Question"], "problem_type": "multiple choice",
                    "options": options, "solution": f"<answer>{row['Answer']}</answer>",
                    "path": f"videos_cropped/{row['video ID']}.mp4", "question_type": row.get("Question Type"),
                    "data_source": "Video-Holmes"})
    return out


HOLMES = register_benchmark(Benchmark(
    name="holmes", title="Video-Holmes", files=("holmes.json",), video_root="Video-Holmes", prompt=prompt,
    score=multiple_choice(lambda text, item: extract_option(text, item["letters"])),
    aggregate=accuracy("question_type"), official_format=official_format, expected_items=1837,
    reference="holmes", oracle=lambda item: f"<answer>{item['gt']}</answer>",
    deviations=("The answer block is read after the reasoning blocks are removed (the profile's rule); "
                "the rule itself is the official one, so an untagged answer is wrong.",),
))
