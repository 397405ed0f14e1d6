"""Video-MME-v2 (no shared file; 800 videos × 4 questions = 3200 MC items, 8 options A–H), the
official grouped non-linear score, with optional subtitles.

Official protocol (MME-Benchmarks/Video-MME-v2, as run by lmms-eval `videomme_v2`): "Question: {q}\n
{options}\nSelect the best answer … Respond with only the letter (A, …, or H) of the correct option.";
extraction the classic regex (`evr1.eval.extractors.lmms.classic`, its prefix list including
"Final Answer:", "Answer:", "Option:") over A–H. Scoring per video (a group of four
questions, ordered by the question id's suffix):
- `relevance` groups: n right out of 4 → (n/4)² (0, 1/16, 4/16, 9/16, 1);
- `logic` groups: the chain of right answers from the first question on counts, by structure:
  [1,2,3,4] → k²/16 for a chain of k; [1,[2,3],4] (questions 2 and 3 parallel) → 0, 1/12, 4/12, 7/12, 1,
  a right 3rd extending a chain stopped at the 2nd; [[1,2],3,4] (1 and 2 parallel) → 0, 1/10, 2/10, 5/10, 1,
  a right 2nd starting the chain when the 1st is wrong.
Headline: the mean group score over videos; parts: naive accuracy, per group type, level, second and
third head (the categories sit on one question of the group).

Official release read by `official_format`: parquet/JSON rows {"video_id", "question_id" ("001-1"),
"question", "options" ("A. …\nB. …" text, or a list), "answer" (letter), "group_type", "group_structure"
("[1, 2, 3, 4]"), "level", "second_head", "third_head"}; videos `data/<video_id>.mp4`; subtitles
`subtitle/<video_id>.jsonl`, one {"text", "start_time", "end_time"} per line.
"""

from __future__ import annotations

import ast
import json
from collections import defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from evr1.eval.benchmark import Benchmark, PromptContext, Report, register_benchmark
from evr1.eval.extractors.lmms import classic
from evr1.eval.formats import read_table
from evr1.eval.items import ItemError
from evr1.eval.metrics import value
from evr1.eval.prompting import finish, letters_phrase, options_block, question
from evr1.eval.scoring import multiple_choice

QUADRATIC = (0.0, 1 / 16, 4 / 16, 9 / 16, 1.0)
LOGIC = {(1, 2, 3, 4): QUADRATIC, (1, (2, 3), 4): (0.0, 1 / 12, 4 / 12, 7 / 12, 1.0),
         ((1, 2), 3, 4): (0.0, 1 / 10, 2 / 10, 5 / 10, 1.0)}


def prompt(item: Mapping[str, Any], ctx: PromptContext) -> str:
    return finish(f"Question: {question(item)}\n{options_block(item)}\n"
                  "Select the best answer to the following multiple-choice question based on the video. "
                  f"Respond with only the letter ({letters_phrase(item)}) of the correct option.", ctx)


def _structure(value_: Any) -> tuple:
    raw = ast.literal_eval(value_) if isinstance(value_, str) else value_
    return tuple(tuple(x) if isinstance(x, list) else x for x in raw)


def group_score(group_type: str, structure: Any, right: Sequence[bool]) -> float:
    """One video's score from its four questions' results (in question order)."""
    if group_type == "relevance":
        return QUADRATIC[sum(bool(r) for r in right)]
    if group_type != "logic":
        raise ValueError(f"videomme_v2: unknown group_type {group_type!r} (relevance, logic)")
    shape = _structure(structure)
    table = LOGIC.get(shape)
    if table is None:
        raise ValueError(f"videomme_v2: unknown group_structure {structure!r}")
    chain = 0
    while chain < len(right) and right[chain]:
        chain += 1
    if shape == (1, (2, 3), 4) and chain == 1 and len(right) > 2 and right[2]:
        chain = 2
    elif shape == ((1, 2), 3, 4) and chain == 0 and len(right) > 1 and right[1]:
        chain = 1
    return table[chain]


def _suffix(item: Mapping[str, Any]) -> int:
    try:
        return int(str(item.get("question_id") or item.get("problem_id")).split("-")[-1])
    except ValueError:
        return 0


def aggregate(pairs: Sequence[tuple[Mapping[str, Any], Mapping[str, Any]]]) -> Report:
    videos: dict[str, list[tuple[Mapping[str, Any], float]]] = defaultdict(list)
    for item, res in pairs:
        videos[str(item.get("video_id") or item["video"])].append((item, value(res)))
    groups: list[tuple[float, dict[str, str]]] = []
    for vid, members in videos.items():
        members.sort(key=lambda m: _suffix(m[0]))
        first = members[0][0]
        labels = {"group_type": str(first.get("group_type"))}
        for key in ("level", "second_head", "third_head"):
            found = [m[0][key] for m in members if m[0].get(key) not in (None, "")]
            labels[key] = str(found[-1]) if found else "unknown"
        s = group_score(str(first.get("group_type")), first.get("group_structure"), [v >= 1.0 for _, v in members])
        groups.append((s, labels))
    mean = lambda xs: sum(xs) / len(xs) if xs else 0.0
    parts: dict[str, float] = {"naive_accuracy": mean([value(r) for _, r in pairs])}
    counts: dict[str, int] = {"items": len(pairs), "groups": len(groups)}
    by: dict[str, list[float]] = defaultdict(list)
    for s, labels in groups:
        for k, v in labels.items():
            by[f"{k}/{v}"].append(s)
    for k, xs in sorted(by.items()):
        parts[k], counts[k] = mean(xs), len(xs)
    return Report("group_score", mean([s for s, _ in groups]), parts, counts)


def official_format(path: Path) -> list[dict]:
    out = []
    for row in read_table(path):
        opts = row["options"]
        options = [l.strip() for l in opts.splitlines() if l.strip()] if isinstance(opts, str) else list(opts)
        if not options:
            raise ItemError(f"videomme_v2 record {row.get('question_id')!r}: field 'options' is empty")
        out.append({**row, "problem_id": row["question_id"], "problem": row["question"],
                    "problem_type": "multiple choice", "options": options,
                    "solution": f"<answer>{row['answer']}</answer>", "path": f"data/{row['video_id']}.mp4"})
    return out


def subtitles(item: Mapping[str, Any], root: Path) -> str | None:
    """`subtitle/<video_id>.jsonl` words joined by spaces (None when absent)."""
    f = Path(root) / "subtitle" / f"{item.get('video_id') or Path(item['video']).stem}.jsonl"
    if not f.is_file():
        return None
    words = [str(json.loads(line).get("text", "")).strip() for line in f.read_text(encoding="utf-8").splitlines()
             if line.strip()]
    return " ".join(w for w in words if w) or None


VIDEOMME_V2 = register_benchmark(Benchmark(
    name="videomme_v2", title="Video-MME-v2", files=("videomme_v2.json",), video_root="Video-MME-v2", prompt=prompt,
    score=multiple_choice(lambda text, item: classic(text, "ABCDEFGH")), aggregate=aggregate,
    official_format=official_format, expected_items=None, subtitles=subtitles,
    group_key=lambda i: str(i.get("group_type", "all")), reference="videomme_v2",
    deviations=("No shared annotation file: the official release (or a file in EasyVideoR1's schema carrying "
                "video_id, question_id and the group fields) is required.",),
))
