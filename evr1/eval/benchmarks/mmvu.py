"""MMVU (validation: 625 multiple choice + 375 open-ended; five options A–E), two splits.

`mmvu-mc` (alias `mmvu`, EasyVideoR1's `mmvu.json`): the 625 multiple-choice items; `mmvu-all`: all
1000. Official protocol (yale-nlp/MMVU, adopted by lmms-eval `mmvu_val`): the prompt below ("Question:…
A: … E: …\\nVisual Information: processed video\\nDo not generate any intermediate reasoning process.
Answer directly…"); a GPT-4o judge grades every answer. Here: multiple choice by VLMEvalKit's rule
stage (V1) on the final answer; open-ended by normalised exact match, the rest left to the LLM judge
pass (`needs_judge`). Accuracy, broken down by discipline (lmms-eval's subject → discipline map; the
subject is the folder of the video path, `./videos/Chemistry/0.mp4`), subject and question type.

Official release read by `official_format`: `validation.json` (or its Parquet), rows with `id`,
`question`, `choices` ({"A": …, "E": …}; empty for open-ended), `answer` (a letter, or the answer
text), `question_type` ("multiple-choice" / "open-ended"), `video_path` ("videos/<Subject>/<n>.mp4";
else `metadata.subject` + `id`).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from evr1.eval.benchmark import Benchmark, PromptContext, register_benchmark
from evr1.eval.extractors.derive import with_fields
from evr1.eval.extractors.open_ended import choice, needs_judge, open_ended
from evr1.eval.formats import read_table
from evr1.eval.metrics import accuracy
from evr1.eval.prompting import finish, options_block, question
from evr1.eval.scoring import by_type

DISCIPLINES = {
    **dict.fromkeys(("Biology", "Chemistry", "Modern_Physics", "Astronomy", "Geography", "Materials_Science",
                     "Neurobiology", "Electromagnetism", "Thermodynamics", "Mechanics"), "Science"),
    **dict.fromkeys(("Civil_Engineering", "Electrical_Engineering", "Mechanical_Engineering", "Biomedical_Engineering",
                     "Electronics_and_Communication", "Computer_Science"), "Engineering"),
    **dict.fromkeys(("Clinical_Medicine", "Basic_Medicine", "Preventive_Medicine", "Pharmacy", "Dentistry"),
                    "Healthcare"),
    **dict.fromkeys(("Art", "Literature", "History", "Law", "Economics", "Management"),
                    "Humanities_and_Social_Science"),
}


def subject(item: Mapping[str, Any]) -> str:
    """The subject folder of the video path: "videos/Chemistry/0.mp4" → "Chemistry"."""
    parts = str(item.get("video") or item.get("path") or "").strip("./").split("/")
    return parts[-2] if len(parts) >= 2 else "unknown"


def discipline(item: Mapping[str, Any]) -> str:
    return DISCIPLINES.get(subject(item), "unknown")


def prompt(item: Mapping[str, Any], ctx: PromptContext) -> str:
    if item["problem_type"] == "multiple choice":
        return finish(f"Question:{question(item)}\n{options_block(item, '{letter}: {text}')}\n"
                      "Visual Information: processed video\nDo not generate any intermediate reasoning process. "
                      "Answer directly with the option letter from the given choices.", ctx)
    return finish(f"Question:{question(item)}\nVisual Information: processed video\n"
                  "Do not generate any intermediate reasoning process. Directly output the final answer.", ctx)


def _records(path: Path, *, mc_only: bool) -> list[dict]:
    out = []
    for row in read_table(path):
        mc = row["question_type"] == "multiple-choice"
        if mc_only and not mc:
            continue
        choices = row.get("choices") or {}
        video = row.get("video_path") or f"videos/{(row.get('metadata') or {}).get('subject', 'unknown')}/{row['id']}.mp4"
        out.append({"problem_id": row["id"], "problem": row["question"],
                    "problem_type": "multiple choice" if mc else "open-ended",
                    "options": [f"{k}. {v}" for k, v in sorted(choices.items()) if v] if mc else [],
                    "solution": f"<answer>{row['answer']}</answer>", "path": video})
    return out


def _oracle(item: Mapping[str, Any]) -> str:
    return str(item["gt"])


SCORE = by_type({"multiple choice": choice, "open-ended": open_ended}, benchmark="mmvu")
AGGREGATE = with_fields(accuracy("discipline", "subject", "problem_type"), discipline=discipline, subject=subject)
DEVIATIONS = (
    "No GPT-4o judge for multiple choice: VLMEvalKit's rule stage (V1) reads the letter from the final answer; "
    "lmms-eval's MMVU rule (any standalone GT letter anywhere, case-insensitively) would credit 'A or B' and the "
    "article 'a'.",
    "Open-ended: normalised exact match of the final answer scores 1; everything else waits for the LLM judge pass "
    "(needs_judge), which replaces GPT-4o.",
)

MMVU_MC = register_benchmark(Benchmark(
    name="mmvu-mc", title="MMVU (multiple choice)", files=("mmvu-mc.json", "mmvu.json"), video_root="MMVU",
    prompt=prompt, score=SCORE, aggregate=AGGREGATE, expected_items=625, aliases=("mmvu",),
    official_format=lambda path: _records(path, mc_only=True), group_key=discipline, reference="mmvu-mc",
    deviations=DEVIATIONS, oracle=_oracle,
))

MMVU_ALL = register_benchmark(Benchmark(
    name="mmvu-all", title="MMVU (multiple choice + open-ended)", files=("mmvu-all.json",), video_root="MMVU",
    prompt=prompt, score=SCORE, aggregate=AGGREGATE, expected_items=1000, needs_judge=needs_judge,
    official_format=lambda path: _records(path, mc_only=False), group_key=discipline, reference="mmvu-all",
    deviations=DEVIATIONS, oracle=_oracle,
))
