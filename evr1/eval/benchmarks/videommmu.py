"""Video-MMMU (900 items: 300 Perception, 300 Comprehension, 300 Adaptation; 882 multiple choice with
2–14 options, 18 numerical), read from `videommmu_with_image.json` (fallback `videommmu.json`).

Official protocol (EvolvingLMMs-Lab/VideoMMMU and lmms-eval `video_mmmu`): Perception and
Comprehension ask "{question}\\n{options}\\nPlease ignore the Quiz question in last frame of the
video."; Adaptation asks "You should watch and learn the video content. Then apply what you learned to
answer the following multi-choice question. The image for this question is at the end of the video.
\\n{question}\\n{options}" (the open-ended variant for numerical items). The Adaptation image is passed
as an image after the video (`item["image"]`, EasyVideoR1's layout). Multiple choice: Video-MMMU's MMMU-style
parse (M1); numerical: Video-MMMU's `parse_open_response` (its 26 key phrases) + `eval_open`. Accuracy per track;
overall = instance-weighted accuracy over the 900.

Which track an item belongs to. The shared file stores no track field, but its order is the official
configs' alphabetical order, 300 items each: problem_id 1–300 = Adaptation (exactly the 300 items with
`image_path`, each question referring to an image), 301–600 = Comprehension (questions that change the
video's example: "If N_s is increased…", "what is the PPV and NPV?"), 601–900 = Perception (recall and
fill-in-the-blank about what the video shows: "the voltage on the primary coil is ____"). Each of the
300 videos has exactly one item in each range. An item with `image_path` is Adaptation whatever its id;
an explicit `track` field (the official loader writes one) wins over both.

Official release read by `official_format`: the Hugging Face dataset's three configs (a folder with one
file or sub-folder per track named Perception / Comprehension / Adaptation, or a JSON object keyed by
track), rows with `id` ("dev_Biology_3"), `question`, `options` (option texts; labels optional),
`answer` (a letter or a number), `question_type` ("multiple-choice" / "open"). Videos are `<id>.mp4`,
Adaptation images `images/<id>.png` (the shared schema's layout); problem ids follow the shared file's
numbering (tracks in alphabetical order, rows in file order).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from evr1.eval.benchmark import Benchmark, PromptContext, register_benchmark
from evr1.eval.extractors.derive import with_fields
from evr1.eval.extractors.mmmu import eval_open, parse_multi_choice, parse_open_response
from evr1.eval.formats import read_table
from evr1.eval.items import option_text
from evr1.eval.metrics import accuracy
from evr1.eval.prompting import finish, options_block, question
from evr1.eval.scoring import by_type, undecided

TRACKS = ("Adaptation", "Comprehension", "Perception")  # the order of the shared file's id ranges
_PER_TRACK = 300


def track(item: Mapping[str, Any]) -> str:
    """The item's track: its `track` field, else Adaptation with an image, else by problem_id range."""
    if item.get("track"):
        return str(item["track"])
    if item.get("image_path") or item.get("image"):
        return "Adaptation"
    try:
        pid = int(item.get("problem_id"))
    except (TypeError, ValueError):
        return "unknown"
    k = (pid - 1) // _PER_TRACK
    return TRACKS[k] if 0 <= k < len(TRACKS) else "unknown"


def prompt(item: Mapping[str, Any], ctx: PromptContext) -> str:
    mc = item["problem_type"] == "multiple choice"
    body = f"{question(item)}\n{options_block(item)}" if mc else question(item)
    if track(item) == "Adaptation":
        kind = "multi-choice" if mc else "open-ended"
        return finish("You should watch and learn the video content. Then apply what you learned to answer the "
                      f"following {kind} question. The image for this question is at the end of the video.\n{body}", ctx)
    return finish(f"{body}\nPlease ignore the Quiz question in last frame of the video.", ctx)


def multiple_choice(output: str, item: Mapping[str, Any]) -> dict[str, Any]:
    pred = parse_multi_choice(output, item["letters"], item["option_texts"])
    return {"score": 1.0 if pred and pred == item["gt"] else 0.0, "pred": pred, **undecided(not pred)}


def numerical(output: str, item: Mapping[str, Any]) -> dict[str, Any]:
    preds = parse_open_response(output)
    return {"score": 1.0 if eval_open(item["gt"], preds) else 0.0, "pred": [str(p) for p in preds],
            **undecided(not preds)}


def _track_of(path: Path, key: str | None) -> str | None:
    for name in (key or "", path.name, path.parent.name):
        for t in TRACKS:
            if t.lower() in name.lower():
                return t
    return None


def official_format(path: Path) -> list[dict]:
    """The three official configs → records in the shared schema, tracks in alphabetical order."""
    path = Path(path)
    files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
    rows: dict[str, list[dict]] = {t: [] for t in TRACKS}
    for f in files:
        if f.suffix not in (".json", ".jsonl", ".parquet", ".csv"):
            continue
        for row in read_table(f):
            t = row.get("track") or _track_of(f, row.get("_key"))
            if t not in rows:
                raise ValueError(f"videommmu: {f}: row {row.get('id')!r} has no track (file, folder or key "
                                 f"named Perception / Comprehension / Adaptation)")
            rows[t].append(row)
    out, n = [], 0
    for t in TRACKS:
        for row in rows[t]:
            n += 1
            mc = row.get("question_type", "multiple-choice") == "multiple-choice"
            opts = [f"{chr(65 + i)}. {option_text(o)}" for i, o in enumerate(row.get("options") or [])] if mc else None
            rec = {"problem_id": n, "problem": row["question"], "problem_type": "multiple choice" if mc else "numerical",
                   "options": opts, "solution": f"<answer>{row['answer']}</answer>", "path": f"{row['id']}.mp4",
                   "track": t}
            if t == "Adaptation":
                rec["image_path"] = f"images/{row['id']}.png"
            out.append(rec)
    return out


VIDEOMMMU = register_benchmark(Benchmark(
    name="videommmu", title="Video-MMMU", files=("videommmu_with_image.json", "videommmu.json"), video_root="VideoMMMU",
    prompt=prompt, score=by_type({"multiple choice": multiple_choice, "numerical": numerical}, benchmark="videommmu"),
    aggregate=with_fields(accuracy("track", "problem_type"), track=track), official_format=official_format,
    expected_items=900, aliases=("videommmu_with_image",), group_key=track, reference="videommmu",
    deviations=(
        "An answer the parser cannot read is `undecided` (the official code scores its 'No Answere Found' wrong; "
        "here it is wrong too unless the judge is on): 'I think so' → '' in both.",
        "videommmu.json (no image_path) is scored with the same tracks by problem_id; its Adaptation items then lack "
        "the question image.",
    ),
))
