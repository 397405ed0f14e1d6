"""MINERVA (EasyVideoR1's file: 1431 MC items, 5 options), accuracy.

Official protocol as run by lmms-eval (`minerva`): "{question}\nA. …\n…E. …" + "\nAnswer with the
option's letter from the given choices directly."; extraction `evr1.eval.extractors.minerva.extract`
(the last "answer is X" in any letter case, else the last capital A–E); a random letter on failure there.

Official release read by `official_format`: `minerva.json` (google-deepmind/neptune), a list of
{"key", "video_id", "question", "answer_choice_0" … "answer_choice_4", "answer_id" (index), "answer",
"question_type"?}; videos `<video_id>.mp4` (the root folder is "Minderva" in EasyVideoR1, sic).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from evr1.eval.benchmark import Benchmark, PromptContext, register_benchmark
from evr1.eval.extractors.minerva import extract
from evr1.eval.formats import read_table
from evr1.eval.items import LETTERS
from evr1.eval.metrics import accuracy
from evr1.eval.prompting import finish, options_block, question
from evr1.eval.scoring import multiple_choice


def prompt(item: Mapping[str, Any], ctx: PromptContext) -> str:
    return finish(f"{question(item)}\n{options_block(item)}\n"
                  "Answer with the option's letter from the given choices directly.", ctx)


def official_format(path: Path) -> list[dict]:
    out = []
    for row in read_table(path):
        cands = [str(row[f"answer_choice_{i}"]) for i in range(10) if row.get(f"answer_choice_{i}") is not None]
        out.append({"problem_id": row.get("key"), "problem": row["question"], "problem_type": "multiple choice",
                    "options": [f"{LETTERS[i]}. {c}" for i, c in enumerate(cands)],
                    "solution": f"<answer>{LETTERS[int(row['answer_id'])]}</answer>", "path": f"{row['video_id']}.mp4",
                    "question_type": row.get("question_type"), "data_source": "Minderva"})
    return out


MINERVA = register_benchmark(Benchmark(
    name="minerva", title="MINERVA", files=("minerva.json",), video_root="Minderva", prompt=prompt,
    score=multiple_choice(lambda text, item: extract(text)), aggregate=accuracy("question_type"),
    official_format=official_format, expected_items=1431, reference="minerva",
    deviations=("No random letter when the answer cannot be read: it is `undecided` (wrong, or judged when the judge "
                "is on): 'I am not sure' → official random A–E, here ''.",),
))
