"""TempCompass (no shared file; multi-choice, yes/no and caption-matching formats), accuracy per task
format, per temporal dimension and per (format, dimension), and their average.

Official protocol (llyx97/TempCompass, as run by lmms-eval `tempcompass`): the question (options on
their own lines) + "\nPlease directly give the best option:" (multi-choice, caption matching) or
"\nPlease answer yes or no:" (yes/no); the rule stage of `evr1.eval.extractors.tempcompass` per format
(no ChatGPT judge). Headline: the mean over the formats present of each format's accuracy.

Two formats are read:
- the release (`official_format`): `questions/<format>.json` with format multi-choice, yes_no or
  caption_matching, each {video_id: {dimension: [{"question", "answer"}]}}; multi-choice questions end
  in "A. …" lines and answers are "B. text" (or "B"); caption-matching questions end in "Caption A: …"
  (or "Sentence A:", "Option A:") lines and answers repeat one; yes/no answers are "yes"/"no";
  videos `videos/<video_id>.mp4`. The captioning format needs a judge and is not read.
- EasyVideoR1's schema (file absent upstream): the shared keys plus `tc_format` (or `format` /
  `task_type`: one of the three), `dimension` (or `dim`), `tc_label` for caption matching; yes/no items
  have problem_type "boolean", no options and solution "<answer>yes</answer>"; a record without a
  format is multi-choice (boolean: yes/no).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from evr1.eval.benchmark import Benchmark, PromptContext, register_benchmark
from evr1.eval.extractors.derive import with_fields
from evr1.eval.extractors.tempcompass import RULES
from evr1.eval.items import ItemError
from evr1.eval.metrics import macro
from evr1.eval.prompting import finish, options_block, question
from evr1.eval.scoring import undecided

FORMATS = ("multi-choice", "yes_no", "caption_matching")
_ALIASES = {"multi-choice": "multi-choice", "multi_choice": "multi-choice", "multiple choice": "multi-choice",
            "mcq": "multi-choice", "yes_no": "yes_no", "yes/no": "yes_no", "yorn": "yes_no", "boolean": "yes_no",
            "caption_matching": "caption_matching", "caption matching": "caption_matching"}
_CAPTION = re.compile(r"^\s*(Caption|Sentence|Option)\s+([A-Z])\s*:\s*(.*)$")
_MC = re.compile(r"^\s*([A-Z])\.\s*(.*)$")


def task_format(item: Mapping[str, Any]) -> str:
    for key in ("tc_format", "format", "task_type"):
        if item.get(key):
            hit = _ALIASES.get(str(item[key]).strip().lower())
            if hit is None:
                raise ItemError(f"tempcompass record {item.get('id')!r}: field {key!r} = {item[key]!r} is not one of {FORMATS}")
            return hit
    return "yes_no" if str(item.get("problem_type")).lower() == "boolean" else "multi-choice"


def dimension(item: Mapping[str, Any]) -> str:
    return str(item.get("dimension") or item.get("dim") or "unknown")


def prompt(item: Mapping[str, Any], ctx: PromptContext) -> str:
    fmt = task_format(item)
    if fmt == "yes_no":
        return finish(f"{question(item)}\nPlease answer yes or no:", ctx)
    style = "{letter}. {text}" if fmt == "multi-choice" else f"{item.get('tc_label') or 'Caption'} {{letter}}: {{text}}"
    return finish(f"{question(item)}\n{options_block(item, style)}\nPlease directly give the best option:", ctx)


def _yes_no_gt(item: Mapping[str, Any]) -> str:
    gt = str(item["gt"]).strip().lower()
    if gt in ("yes", "no"):
        return gt
    if item["gt"] in item["letters"]:
        return item["option_texts"][item["letters"].index(item["gt"])].strip().lower()
    return gt


def score(output: str, item: Mapping[str, Any]) -> dict[str, Any]:
    fmt = task_format(item)
    pred = RULES[fmt](output, item)
    gt = _yes_no_gt(item) if fmt == "yes_no" else item["gt"]
    return {"score": 1.0 if pred and pred == gt else 0.0, "pred": pred, **undecided(not pred)}


def oracle(item: Mapping[str, Any]) -> str:
    return _yes_no_gt(item) if task_format(item) == "yes_no" else str(item["gt"])


def _record(fmt: str, vid: str, dim: str, n: int, qa: Mapping[str, Any]) -> dict:
    where = f"tempcompass {fmt} record {vid}/{dim}/{n}"
    lines = [l for l in str(qa["question"]).splitlines() if l.strip()]
    base = {"problem_id": f"{fmt}/{vid}/{dim}/{n}", "path": f"videos/{vid}.mp4", "tc_format": fmt, "dimension": dim,
            "video_id": vid}
    answer = str(qa["answer"]).strip()
    if fmt == "yes_no":
        if answer.lower() not in ("yes", "no"):
            raise ItemError(f"{where}: field 'answer' {answer!r} is not yes or no")
        return {**base, "problem": "\n".join(lines), "problem_type": "boolean", "options": [],
                "solution": f"<answer>{answer.lower()}</answer>"}
    pat = _MC if fmt == "multi-choice" else _CAPTION
    opts = [(m, i) for i, l in enumerate(lines) if (m := pat.match(l))]
    if not opts:
        raise ItemError(f"{where}: field 'question' holds no option lines")
    stem = "\n".join(lines[: opts[0][1]])
    if fmt == "multi-choice":
        options = [f"{m.group(1)}. {m.group(2).strip()}" for m, _ in opts]
        letter = answer[0] if answer[:1] in [m.group(1) for m, _ in opts] and answer[1:2] in ("", ".", ")") else \
            next((m.group(1) for m, _ in opts if m.group(2).strip() == answer), "")
        extra: dict[str, Any] = {}
    else:
        options = [f"{m.group(2)}. {m.group(3).strip()}" for m, _ in opts]
        am = _CAPTION.match(answer)
        letter = am.group(2) if am else next((m.group(2) for m, _ in opts if m.group(3).strip() == answer), "")
        extra = {"tc_label": opts[0][0].group(1)}
    if not letter:
        raise ItemError(f"{where}: field 'answer' {answer!r} matches no option")
    return {**base, **extra, "problem": stem, "problem_type": "multiple choice", "options": options,
            "solution": f"<answer>{letter}</answer>"}


def official_format(path: Path) -> list[dict]:
    """`questions/<format>.json` files (the release folder, `questions/`, or one file) → records."""
    path = Path(path)
    if path.is_dir() and (path / "questions").is_dir():
        path = path / "questions"
    files = [path / f"{f}.json" for f in FORMATS if (path / f"{f}.json").is_file()] if path.is_dir() else [path]
    if not files:
        raise ItemError(f"tempcompass: no {', '.join(f + '.json' for f in FORMATS)} in {path}")
    out = []
    for f in files:
        fmt = _ALIASES.get(f.stem)
        if fmt is None:
            raise ItemError(f"tempcompass: {f} is not one of the task formats {FORMATS}")
        data = json.loads(f.read_text(encoding="utf-8"))
        for vid, dims in data.items():
            for dim, qas in dims.items():
                out.extend(_record(fmt, vid, dim, n, qa) for n, qa in enumerate(qas))
    return out


TEMPCOMPASS = register_benchmark(Benchmark(
    name="tempcompass", title="TempCompass", files=("tempcompass.json",), video_root="TempCompass", prompt=prompt,
    score=score, oracle=oracle, official_format=official_format, expected_items=None,
    aggregate=with_fields(macro("tc_format", "dimension", "format_dimension", metric="format-mean"),
                          tc_format=task_format, dimension=dimension,
                          format_dimension=lambda i: f"{task_format(i)}:{dimension(i)}"),
    group_key=task_format, reference="tempcompass",
    deviations=("No ChatGPT judge after the rules: an answer the rules cannot read is `undecided`, judged by the "
                "configured LLM judge when eval.judge.enabled, else wrong.",
                "The captioning format (judge-scored) is not loaded.",
                "EasyVideoR1's tempcompass.json is absent upstream; the schema read for it is our assumption."),
))
