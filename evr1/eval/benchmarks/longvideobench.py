"""LongVideoBench validation (1337 MC items, 3–5 options), accuracy, optional subtitles.

Official protocol (longvideobench/LongVideoBench, lmms-eval `longvideobench_val_v`, VLMEvalKit):
"{question}\nA. …\nB. …\nAnswer with the option's letter from the given choices directly.\n";
extraction lmms-eval's `parse_multi_choice_response` (the classic regex L2 with LongVideoBench's
own prefix list, letters A–E whatever the item's option count: `evr1.eval.extractors.lmms.classic`);
the paper and lmms-eval pick a random letter when parsing fails. Accuracy, by duration group and question category
where the item has them. The interleaved-subtitle setting (`_val_i`) puts the subtitles first here.

Official release read by `official_format`: `lvb_val.json`, a list of {"id", "video_id", "video_path"
("<id>.mp4"), "subtitle_path" ("<id>_en.json"), "question", "candidates" (texts), "correct_choice"
(index), "duration_group", "question_category", "topic_category", "level"}; videos `videos/<video_path>`;
subtitles `subtitles/<video>_en.json`, a list of {"start", "end", "line"}.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from evr1.eval.benchmark import Benchmark, PromptContext, register_benchmark
from evr1.eval.extractors.lmms import LVB_PREFIXES, classic
from evr1.eval.formats import read_table
from evr1.eval.items import LETTERS
from evr1.eval.metrics import accuracy
from evr1.eval.prompting import finish, options_block, question
from evr1.eval.scoring import multiple_choice
from evr1.eval.subtitles import json_text


PREFIXES = (*LVB_PREFIXES, "Answer:")  # the source's list (commas intact) + "Answer:" (a deviation)


def prompt(item: Mapping[str, Any], ctx: PromptContext) -> str:
    return finish(f"{question(item)}\n{options_block(item)}\n"
                  "Answer with the option's letter from the given choices directly.\n", ctx)


def official_format(path: Path) -> list[dict]:
    out = []
    for row in read_table(path):
        cands = [str(c) for c in row["candidates"]]
        out.append({"problem_id": row["id"], "problem": row["question"], "problem_type": "multiple choice",
                    "options": [f"{LETTERS[i]}. {c}" for i, c in enumerate(cands)],
                    "solution": f"<answer>{LETTERS[int(row['correct_choice'])]}</answer>",
                    "path": f"videos/{row['video_path']}", "video_id": row.get("video_id"),
                    **{k: row.get(k) for k in ("duration_group", "question_category", "topic_category", "level")}})
    return out


def subtitles(item: Mapping[str, Any], root: Path) -> str | None:
    """`subtitles/<video>_en.json` under the video root (None when absent)."""
    return json_text(Path(root) / "subtitles" / f"{Path(item['video']).stem}_en.json")


LONGVIDEOBENCH = register_benchmark(Benchmark(
    name="longvideobench", title="LongVideoBench (val)", files=("longvideobench.json",), video_root="LongVideoBench",
    prompt=prompt, score=multiple_choice(lambda text, item: classic(text, "ABCDE", prefixes=PREFIXES)),
    aggregate=accuracy("duration_group", "question_category"), official_format=official_format, expected_items=1337,
    subtitles=subtitles, reference="longvideobench",
    deviations=("No random letter when the answer cannot be parsed: it is `undecided` (wrong, or judged when the "
                "judge is on), so scores are reproducible: 'no idea' → official random A–E, here ''.",
                "'Answer:' is removed with the source's prefixes (its list lacks it): 'Answer: C' → C, official A "
                "(the A of 'Answer')."),
))
