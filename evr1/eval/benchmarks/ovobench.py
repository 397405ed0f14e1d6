"""OVO-Bench (3035 items: 1468 backward / real-time multiple choice, 698 REC counting, 629 SSR and 240
CRR yes/no; forward items expanded per test point, one pre-cut chunk `<ovo_id>_<i>.mp4` each).

Official protocol (JoeLeelyf/OVO-Bench, lmms-eval `ovobench`): backward / real-time "Question: {q}\\n
Options:\\nA. …\\n…\\nRespond only with the letter corresponding to your chosen option (e.g., A, B, C).
Do not include any additional text or explanation in your response."; forward tasks use fixed task
templates (below; as EasyVideoR1 copies them). Scoring (`evr1.eval.extractors.ovo`): multiple choice —
the one option letter named; REC — the digits of the answer equal the count; SSR / CRR — yes or no
against `ovo_type` (1 = Yes). Aggregation: per-task accuracy → category = mean of its tasks →
overall = mean of the three categories (backward: EPM, ASI, HLD; realtime: STU, OJR, ATR, ACR, OCR, FPD;
forward: REC, SSR, CRR), a missing category counting 0.

Official release read by `official_format`: `ovo_bench_new.json` rows with `id`, `task`, `video`;
backward / real-time rows `question`, `options` (texts), `gt` (option index); REC rows `activity` and
`test_info` [{"count"}]; SSR rows `test_info` [{"step", "type"}]; CRR rows `question` and `test_info`
[{"type"}]. Forward rows expand to one item per test point, video `<id>_<i>.mp4` (the pre-cut chunk).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from evr1.eval.benchmark import Benchmark, PromptContext, register_benchmark
from evr1.eval.extractors.ovo import choice_letter, digits, yes_no
from evr1.eval.formats import read_table
from evr1.eval.metrics import nested_macro
from evr1.eval.prompting import finish, options_block, question
from evr1.eval.scoring import by_type

CATEGORIES = {"backward": ("EPM", "ASI", "HLD"), "realtime": ("STU", "OJR", "ATR", "ACR", "OCR", "FPD"),
              "forward": ("REC", "SSR", "CRR")}
_CATEGORY_OF = {t: c for c, ts in CATEGORIES.items() for t in ts}
_NO_EXTRA = "Do not include any additional text or explanation in your response."
TEMPLATES = {
    "REC": ("You're watching a video in which people may perform a certain type of action repetively. The person "
            "performing this kind of action are referred to as 'they' in the following statement. You're task is to "
            "count how many times have different people in the video perform this kind of action in total. One complete "
            "motion counts as one. Now, answer the following question: {q}\nProvide your answer as a single number "
            f"(e.g., 0, 1, 2, 3…) indicating the total count. {_NO_EXTRA}"),
    "SSR": ("You're watching a tutorial video which contain a sequential of steps. The following is one step from the "
            "whole procedures: \n{q}\nYour task is to determine if the man or woman in the video is currently performing "
            f"this step.\nAnswer only with \"Yes\" or \"No\". {_NO_EXTRA}"),
    "CRR": ("You're responsible of answering questions based on the video content. The following question are relevant "
            "to the latest frames, i.e. the end of the video.\n{q}\nDecide whether existing visual content, especially "
            "latest frames, i.e. frames that near the end of the video, provide enough information for answering the "
            f"question.\nAnswer only with \"Yes\" or \"No\". {_NO_EXTRA}"),
}


def prompt(item: Mapping[str, Any], ctx: PromptContext) -> str:
    template = TEMPLATES.get(item["problem_type"])
    if template is not None:
        return finish(template.format(q=question(item)), ctx)
    return finish(f"Question: {question(item)}\nOptions:\n{options_block(item)}\n"
                  f"Respond only with the letter corresponding to your chosen option (e.g., A, B, C). {_NO_EXTRA}", ctx)


def multiple_choice(output: str, item: Mapping[str, Any]) -> dict[str, Any]:
    pred = choice_letter(output, item["letters"])
    return {"score": 1.0 if pred and pred == item["gt"] else 0.0, "pred": pred}


def rec(output: str, item: Mapping[str, Any]) -> dict[str, Any]:
    pred, gt = digits(output), digits(str(item["gt"]))
    return {"score": 1.0 if pred and pred == gt else 0.0, "pred": pred}


def expected_yes_no(item: Mapping[str, Any]) -> str:
    if item.get("ovo_type") in (0, 1):
        return "YES" if item["ovo_type"] == 1 else "NO"
    return yes_no(str(item["gt"]))


def yes_or_no(output: str, item: Mapping[str, Any]) -> dict[str, Any]:
    pred = yes_no(output)
    return {"score": 1.0 if pred and pred == expected_yes_no(item) else 0.0, "pred": pred}


def oracle(item: Mapping[str, Any]) -> str:
    return str(item["gt"])


def _forward(row: Mapping[str, Any]) -> list[dict]:
    task, out = row["task"], []
    for i, info in enumerate(row.get("test_info") or []):
        rec_ = {"problem_id": f"ovo_{row['id']}_{i}", "problem_type": task, "options": [], "path": f"{row['id']}_{i}.mp4",
                "ovo_task": task, "ovo_category": "forward", "ovo_id": row["id"], "ovo_test_idx": i}
        if task == "REC":
            rec_.update(problem=f"How many times did they {row['activity']}?", solution=f"<answer>{info['count']}</answer>")
        else:
            rec_.update(problem=info["step"] if task == "SSR" else row["question"], ovo_type=int(info["type"]),
                        solution=f"<answer>{'Yes' if int(info['type']) == 1 else 'No'}</answer>")
        out.append(rec_)
    return out


def official_format(path: Path) -> list[dict]:
    out = []
    for row in read_table(path):
        task = row["task"]
        if task not in _CATEGORY_OF:
            raise ValueError(f"ovobench: {path}: row {row.get('id')!r}: field 'task' = {task!r} is not an OVO-Bench task")
        if _CATEGORY_OF[task] == "forward":
            out.extend(_forward(row))
            continue
        out.append({"problem_id": f"ovo_{row['id']}", "problem": row["question"], "problem_type": "multiple choice",
                    "options": [f"{chr(65 + i)}: {o}" for i, o in enumerate(row["options"])],
                    "solution": f"<answer>{chr(65 + int(row['gt']))}</answer>", "path": f"{row['id']}.mp4",
                    "ovo_task": task, "ovo_category": _CATEGORY_OF[task], "ovo_id": row["id"]})
    return out


OVOBENCH = register_benchmark(Benchmark(
    name="ovobench", title="OVO-Bench", files=("ovobench.json",), video_root="OVO-Bench/chunked_videos", prompt=prompt,
    score=by_type({"multiple choice": multiple_choice, "REC": rec, "SSR": yes_or_no, "CRR": yes_or_no},
                  benchmark="ovobench"),
    aggregate=nested_macro("ovo_task", "ovo_category", categories=tuple(CATEGORIES)), official_format=official_format,
    expected_items=3035, group_key=lambda item: str(item.get("ovo_task", "unknown")), reference="ovobench",
    oracle=oracle,
    deviations=(
        "Multiple choice: the response must name exactly one option letter (the article 'A' before a lower-case word "
        "is not a choice); the official substring test counts 'A person…, so C' as A.",
        "SSR / CRR: 'yes' / 'no' as whole words in any case, exactly one of them; the official case-sensitive "
        "substring test reads 'yes' as wrong and 'Not sure' as No.",
        "Forward tasks are scored per test point as single-turn items on pre-cut chunks (EasyVideoR1's expansion), "
        "not by the official multi-round streaming loop.",
    ),
))
