"""VideoMathQA (420 questions; each a five-option MCQ plus 4 two-option "multi-binary" items sharing its
`problem_id`: 2100 items), with optional subtitles.

Official protocol (lmms-eval `videomathqa_mcq` / `videomathqa_mbin`, from the authors): "Select the best
answer to the following multiple-choice question based on the video. Respond with the letter (A, B, C,
D or E) of the correct option." (binary: "(A or B)"; "based on the video and the subtitles" with
subtitles) + question + options + "Answer with the option's letter … from the given choices directly.";
the classic regex (L2, [ABCDE]) reads the letter.

Metrics: MCQ accuracy over the 420 five-option items, and MBin: a question counts only if all 4 of its
binary items are right, accuracy over the 420 groups. **Headline: MBin** — the benchmark's stricter
metric, robust to guessing (a constant answer scores ~1/5 on MCQ but ~1/16 on MBin); MCQ accuracy and the
micro accuracy over all 2100 (EasyVideoR1's number) are parts, with MCQ accuracy per category and length.

Official release read by `official_format`: the `mcq` and `multi_binary` configs (Parquet / JSON), rows
with `question_id` (shared by a question's MCQ and binaries), `videoID`, `question`, `options`
("A. …"), `answer` (a letter), `category`, `length`; a binary row has 2 options (and an optional
`mbinary_id`). Subtitles: `subtitles/<videoID>.srt` under the video root.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from evr1.eval.benchmark import Benchmark, PromptContext, Report, register_benchmark
from evr1.eval.extractors.lmms import classic
from evr1.eval.formats import read_table
from evr1.eval.metrics import all_of, breakdown
from evr1.eval.prompting import finish, options_block, question
from evr1.eval.scoring import multiple_choice
from evr1.eval.subtitles import srt_text


def is_binary(item: Mapping[str, Any]) -> bool:
    return item.get("mbinary_id") is not None


def is_mcq(item: Mapping[str, Any]) -> bool:
    return not is_binary(item)


def prompt(item: Mapping[str, Any], ctx: PromptContext) -> str:
    letters = "A or B" if len(item["letters"]) == 2 else "A, B, C, D or E"
    source = "the video and the subtitles" if ctx.subtitles else "the video"
    return finish(f"Select the best answer to the following multiple-choice question based on {source}. "
                  f"Respond with the letter ({letters}) of the correct option.\n{question(item)}\n{options_block(item)}\n"
                  f"\nAnswer with the option's letter ({letters}) from the given choices directly.", ctx)


def official_format(path: Path) -> list[dict]:
    out, seen = [], {}
    for row in read_table(path):
        binary = len(row["options"]) == 2
        rec = {"problem_id": row["question_id"], "problem": row["question"], "problem_type": "multiple choice",
               "options": list(row["options"]), "solution": f"<answer>{row['answer']}</answer>",
               "path": f"videos/{row['videoID']}.mp4", "video_id": row["videoID"], "category": row.get("category"),
               "length": row.get("length")}
        if binary:
            k = seen[row["question_id"]] = seen.get(row["question_id"], 0) + 1
            rec["mbinary_id"] = row.get("mbinary_id", k)
        out.append(rec)
    return out


def subtitles(item: Mapping[str, Any], root: Path) -> str | None:
    vid = item.get("video_id") or Path(item["video"]).stem
    return srt_text(root / "subtitles" / f"{vid}.srt")


_MBIN = all_of("problem_id", member=is_binary, metric="mbin", also={"mcq": is_mcq})


def aggregate(pairs) -> Report:
    """MBin (headline), MCQ accuracy, micro accuracy; MCQ accuracy per category and length."""
    rep = _MBIN(pairs)
    parts, counts = breakdown([(i, r) for i, r in pairs if is_mcq(i)], ("category", "length"))
    return Report(rep.metric, rep.value, {**rep.parts, **{f"mcq/{k}": v for k, v in parts.items()}},
                  {**rep.counts, **{f"mcq/{k}": v for k, v in counts.items()}})


VIDEOMATHQA = register_benchmark(Benchmark(
    name="videomathqa", title="VideoMathQA", files=("videomathqa.jsonl",), video_root="VideoMathQA", prompt=prompt,
    score=multiple_choice(lambda text, item: classic(text, "ABCDE")), aggregate=aggregate,
    official_format=official_format, expected_items=2100, id_fields=("problem_id", "mbinary_id"),
    group_key=lambda item: "binary" if is_binary(item) else "mcq", subtitles=subtitles, reference="videomathqa",
    deviations=(
        "The classic regex's prefix list is fixed: its two missing commas (adjacent literals concatenate, so "
        "'Best option:(D)' reads B of 'Best', here D) and 'Answer:', 'Option:', 'Final Answer:' added ('Answer: C' "
        "reads A of 'Answer', here C).",
        "Headline MBin over the 420 questions (MCQ accuracy reported beside it); EasyVideoR1's micro accuracy over "
        "2100 items is a part, not the headline.",
        "Subtitles, when used, are the whole .srt file, not only the lines at lmms-eval's sampled frames.",
    ),
))
