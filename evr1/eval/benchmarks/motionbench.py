"""MotionBench dev (EasyVideoR1's file: 4018 MC items with answers, 2–4 options), accuracy.

Official protocol as run by lmms-eval (`motionbench`): "{question}\nA. …\nB. …\nAnswer with only the
option letter (A, B, C, D, E, or F)." (here the item's own letters); extraction
`evr1.eval.extractors.motionbench.extract`. Accuracy, with the answered rate (share of items whose
answer was readable) and breakdowns by question category and by source (self-collected / public).

Official release read by `official_format`: `video_info.meta.jsonl` (THUDM/MotionBench), one line per
video: {"key", "video_path" ("self-collected/….mp4"), "video_type", "question_type", "qa": [{"uid",
"question" (stem, then "A. …" lines), "answer" (letter; "NA" on the unreleased test split),
"question_type"?}]}. Items without a released answer are left out.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from evr1.eval.benchmark import Benchmark, PromptContext, Report, register_benchmark
from evr1.eval.benchmarks.lvbench import split_question
from evr1.eval.extractors.derive import with_fields
from evr1.eval.extractors.motionbench import extract
from evr1.eval.formats import read_table
from evr1.eval.metrics import accuracy
from evr1.eval.prompting import finish, letters_phrase, options_block, question
from evr1.eval.scoring import multiple_choice


def prompt(item: Mapping[str, Any], ctx: PromptContext) -> str:
    return finish(f"{question(item)}\n{options_block(item)}\n"
                  f"Answer with only the option letter ({letters_phrase(item)}).", ctx)


def official_format(path: Path) -> list[dict]:
    out = []
    for video in read_table(path):
        for qa in video["qa"]:
            stem, options = split_question(qa["question"], where=f"motionbench record {qa.get('uid')!r}")
            if str(qa.get("answer", "")).strip() not in [o[0] for o in options]:
                continue  # no released answer
            out.append({"problem_id": qa["uid"], "problem": stem, "problem_type": "multiple choice", "options": options,
                        "solution": f"<answer>{qa['answer']}</answer>",
                        "path": video.get("video_path") or f"{video['key']}.mp4", "data_source": "MotionBench",
                        "original_question_type": qa.get("question_type") or video.get("question_type")})
    return out


def source(item: Mapping[str, Any]) -> str:
    """'self-collected' or 'public-dataset': the video's top folder."""
    parts = Path(str(item.get("video", ""))).parts
    return parts[0] if len(parts) > 1 else "unknown"


def _report(pairs: Sequence[tuple[Mapping[str, Any], Mapping[str, Any]]]) -> Report:
    rep = with_fields(accuracy("original_question_type", "source"), source=source)(pairs)
    answered = [1.0 if (r and "error" not in r and r.get("pred")) else 0.0 for _, r in pairs]
    parts = {**rep.parts, "answered_rate": sum(answered) / len(answered) if answered else 0.0}
    return Report(rep.metric, rep.value, parts, rep.counts)


MOTIONBENCH = register_benchmark(Benchmark(
    name="motionbench", title="MotionBench (dev)", files=("motionbench.json",),
    video_root="MotionBench-official/MotionBench", prompt=prompt,
    score=multiple_choice(lambda text, item: extract(text, item["letters"])), aggregate=_report,
    official_format=official_format, expected_items=4018, group_key=lambda i: str(i.get("original_question_type")),
    reference="motionbench",
    deviations=("The answer is not upper-cased before matching, so the article 'a' is not read as A "
                "('The answer is a cat' → unreadable; lmms-eval gives A).",
                "Letters are the item's own options (lmms-eval: A–F for every item).",
                "4018 dev items as in EasyVideoR1's file (the report says 3715)."),
))
