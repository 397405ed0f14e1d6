"""ODV-Bench (no shared file: 7896 MC items in EasyVideoR1's report, on pre-cut clips), accuracy with
breakdowns by `odv_task` and `odv_subtask`.

No official rule in the reference document: the prompt is the Qwen3-VL multiple-choice prompt that
EasyVideoR1 uses; scoring uses our strict extractor (`evr1.eval.extractors.strict`).

Two formats, both assumed (neither file was available):
- EasyVideoR1's schema (`odvbench.json`): the shared keys plus `odv_task`, `odv_subtask`; `path` is the
  cut clip `<index>_<stem>_s<start>_e<end>.mp4` under `ODV-Bench/clips`.
- The release (`official_format`): a JSON list of {"video" (source path), "start", "end" (seconds),
  "question", "options" (list of texts or "A. …", or {"A": …}), "answer" (letter), "task", "subtask",
  "id"?}; the clip name is built the way EasyVideoR1's cutter names it, from the row's index.
"""

from __future__ import annotations

from pathlib import Path

from evr1.eval.benchmark import Benchmark, register_benchmark
from evr1.eval.benchmarks.livesports3k_qa import mc_prompt
from evr1.eval.benchmarks.longvideoreason import labelled
from evr1.eval.extractors.strict import strict_letter
from evr1.eval.formats import read_table
from evr1.eval.metrics import accuracy
from evr1.eval.scoring import multiple_choice


def clip_name(index: int, video: str, start: float, end: float) -> str:
    """EasyVideoR1's clip name: `<index>_<stem>_s<start>_e<end>.mp4`."""
    return f"{index}_{Path(video).stem}_s{start}_e{end}.mp4"


def official_format(path: Path) -> list[dict]:
    return [{"problem_id": row.get("id", n), "problem": row["question"], "problem_type": "multiple choice",
             "options": labelled(row["options"]), "solution": f"<answer>{str(row['answer']).strip()}</answer>",
             "path": clip_name(n, row["video"], row["start"], row["end"]), "data_source": "ODV-Bench",
             "odv_task": row.get("task"), "odv_subtask": row.get("subtask")}
            for n, row in enumerate(read_table(path))]


ODVBENCH = register_benchmark(Benchmark(
    name="odvbench", title="ODV-Bench", files=("odvbench.json",), video_root="ODV-Bench/clips", prompt=mc_prompt(),
    score=multiple_choice(lambda text, item: strict_letter(text, item["letters"])),
    aggregate=accuracy("odv_task", "odv_subtask"), official_format=official_format, expected_items=None,
    group_key=lambda i: str(i.get("odv_task")), reference="odvbench",
    deviations=("No official rule to follow: our strict extractor decides (documented in evr1.eval.extractors.strict).",
                "Both annotation formats are assumptions: no ODV-Bench file was available."),
))
