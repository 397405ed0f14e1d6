"""LiveSports-3K QA (1174 MC items on pre-cut clips, 4 options written "A: text"), accuracy with
breakdowns by question type (What / Who / When) and OCR flag.

No official rule in the reference document (only EasyVideoR1 runs it): the prompt is the Qwen3-VL
multiple-choice prompt EasyVideoR1 uses, options in the benchmark's "A: text" style; scoring uses our
strict extractor (`evr1.eval.extractors.strict`), restricted to the item's options.

Official release read by `official_format` (assumed; stdKonjac/LiveSports-3K QA split): rows of
{"video_id", "begin", "end" (seconds of the clip), "event_id", "question_id", "question", "options"
(list of "A: …" or texts) or "option_A"…"option_D", "answer" (letter), "q_type" (What/Who/When),
"ocr" (0/1)}; clips are cut first and named `<video_id>_<begin>_<end>.mp4` (EasyVideoR1's cutter).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from evr1.eval.benchmark import Benchmark, PromptContext, register_benchmark
from evr1.eval.benchmarks.longvideoreason import labelled
from evr1.eval.extractors.strict import strict_letter
from evr1.eval.formats import read_table
from evr1.eval.metrics import accuracy
from evr1.eval.prompting import finish, letters_phrase, options_block, question
from evr1.eval.scoring import multiple_choice


def mc_prompt(style: str = "{letter}. {text}"):
    """The Qwen3-VL multiple-choice prompt (as Video-MME's), options in `style`."""

    def prompt(item: Mapping[str, Any], ctx: PromptContext) -> str:
        return finish(
            "Select the best answer to the following multiple-choice question based on the video. "
            f"Respond with only the letter ({letters_phrase(item)}) of the correct option.\n"
            f"Question: {question(item)}\n{options_block(item, style)}\nThe best answer is:", ctx)

    return prompt


def official_format(path: Path) -> list[dict]:
    out = []
    for row in read_table(path):
        opts = row.get("options") or [row[f"option_{l}"] for l in "ABCDEFGH" if row.get(f"option_{l}") is not None]
        options = [o.replace(". ", ": ", 1) if o[1:3] == ". " else o for o in labelled(opts)]
        pid = row.get("question_id") or f"{row['video_id']}_e{row.get('event_id')}_q{row.get('q_id', 1)}"
        out.append({"problem_id": pid, "problem": row["question"], "problem_type": "multiple choice",
                    "options": options, "solution": f"<answer>{row['answer']}</answer>",
                    "path": f"{row['video_id']}_{row['begin']}_{row['end']}.mp4", "data_source": "LiveSports-3K-QA",
                    "q_type_livesports": row.get("q_type"), "ocr_livesports": int(row.get("ocr") or 0)})
    return out


LIVESPORTS = register_benchmark(Benchmark(
    name="livesports3k_qa", title="LiveSports-3K QA", files=("livesports3k_qa.json",),
    video_root="LiveSports-3K-QA/clips", prompt=mc_prompt("{letter}: {text}"),
    score=multiple_choice(lambda text, item: strict_letter(text, item["letters"])),
    aggregate=accuracy("q_type_livesports", "ocr_livesports"), official_format=official_format, expected_items=1174,
    group_key=lambda i: str(i.get("q_type_livesports")), id_fields=("problem_id", "path"), reference="livesports3k_qa",
    deviations=("No official rule to follow: our strict extractor decides (documented in evr1.eval.extractors.strict).",
                "Items are named by problem_id and clip path: five problem_ids repeat in the shared file."),
))
