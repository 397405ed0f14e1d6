"""LongVideo-Reason eval set (NVlabs/Long-RL; EasyVideoR1's file: 851 MC items, 4–8 options), accuracy.

No official extraction rule was available to the reference document (its think/answer format is
recalled, not read), so the prompt asks for reasoning in `<think>` and the letter in `<answer>`, and
scoring uses our strict extractor (`evr1.eval.extractors.strict`): the answer tag, else a
final-answer phrase, else a lone letter, restricted to the item's options.

Official release read by `official_format` (assumed): a JSON list of {"id", "video" (file name),
"question", "options" (list of texts, or of "A. …"), "answer" (letter)}; videos `<video>` under the
root `longvila_videos`. Two source videos do not decode with decord (NVlabs/Long-RL#37).
"""

from __future__ import annotations

import re

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from evr1.eval.benchmark import Benchmark, PromptContext, register_benchmark
from evr1.eval.extractors.strict import strict_letter
from evr1.eval.formats import read_table
from evr1.eval.items import LETTERS
from evr1.eval.metrics import accuracy
from evr1.eval.prompting import finish, options_block, question
from evr1.eval.scoring import multiple_choice


def prompt(item: Mapping[str, Any], ctx: PromptContext) -> str:
    return finish(f"{question(item)}\n{options_block(item)}\nThink about the question step by step inside <think> "
                  "</think> tags, then give only the letter of the correct option inside <answer> </answer> tags.", ctx)


def labelled(options: Any) -> list[str]:
    """Options as labelled strings: texts get "A. ", already-labelled ones ("A. x", "A: x", "(A) x") are
    kept, and a {"A": text} mapping becomes "A. text"."""
    if isinstance(options, Mapping):
        return [f"{k}. {v}" for k, v in sorted(options.items())]
    return [s if re.match(rf"\(?{LETTERS[i]}\s*[.:)]", s) else f"{LETTERS[i]}. {s}"
            for i, s in enumerate(str(o).strip() for o in options)]


def official_format(path: Path) -> list[dict]:
    return [{"problem_id": row.get("id", n), "problem": row["question"], "problem_type": "multiple choice",
             "options": labelled(row["options"]), "solution": f"<answer>{str(row['answer']).strip()}</answer>",
             "path": str(row["video"]), "data_source": "LongVideo-Reason"} for n, row in enumerate(read_table(path))]


LONGVIDEOREASON = register_benchmark(Benchmark(
    name="longvideoreason", title="LongVideo-Reason", files=("longvideoreason.json",), video_root="longvila_videos",
    prompt=prompt, score=multiple_choice(lambda text, item: strict_letter(text, item["letters"])),
    aggregate=accuracy(), official_format=official_format, expected_items=851, reference="longvideoreason",
    oracle=lambda item: f"<answer>{item['gt']}</answer>",
    deviations=("No official rule to follow: our strict extractor decides (documented in evr1.eval.extractors.strict).",),
))
