"""Validate one parsed record against the EasyVideoR1 schema and normalise it into sample columns.

Each rule is a small function in `CHECKS`, run in order; a rule either fixes the draft and leaves a
note (numeric answer → string, missing placeholder → inserted) or raises `RecordError` naming the
field. The rules close the reference's traps (spec §7.1): numeric answers that silently score 0,
questions without a `<video>` placeholder, image+video samples, media paths escaping the data root.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evr1.data.schema import PLACEHOLDERS, canonical_json

ProblemTypeResolver = Callable[[str], "str | None"]

#: Canonical types whose ground truth is structured JSON (a list/dict answer is serialised).
GROUNDING_TYPES = frozenset(
    {"temporal grounding", "spatial grounding", "spatial temporal grounding", "tracking", "segmentation"}
)
MULTIPLE_CHOICE = "multiple choice"


def default_resolve_problem_type(raw: str) -> str | None:
    """Lower-case and trim (as EasyVideoR1's rewards do); an empty type is unknown."""
    return raw.strip().lower() or None


def _type_key(problem_type: str) -> str:
    """Compare type names loosely: 'Spatial-Temporal_Grounding' ~ 'spatial temporal grounding'."""
    return " ".join(problem_type.lower().replace("_", " ").replace("-", " ").split())


class RecordError(Exception):
    """A record breaks a rule. `kind` groups reasons in the report; `field` is "" for whole-record errors."""

    def __init__(self, kind: str, field: str, message: str):
        super().__init__(message)
        self.kind = kind
        self.field = field
        self.message = message


@dataclass(frozen=True)
class Context:
    """Where relative media paths resolve and how strictly media are checked."""

    base_dir: Path
    data_root: Path | None
    check_media_exists: bool
    resolve_problem_type: ProblemTypeResolver
    # data.offline_key: the field holding a pre-collected trajectory (mixed offline-online); None: not checked.
    offline_key: str | None = None


@dataclass
class Draft:
    """The record being normalised; becomes a `Sample` once every check passes."""

    record: dict[str, Any]
    problem: str = ""
    answer: str = ""
    problem_type: str = ""
    problem_type_raw: str = ""
    data_type: str = "text"
    options: list[str] = field(default_factory=list)
    videos: list[str] = field(default_factory=list)
    images: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


_JSON_TYPES = {dict: "object", list: "array", str: "string", int: "number", float: "number", bool: "boolean"}


def _json_type(value: Any) -> str:
    """The JSON name of a value's type, for messages a dataset author understands."""
    return _JSON_TYPES.get(type(value), type(value).__name__)


def check_text(d: Draft, ctx: Context) -> None:
    """Every string must be storable as UTF-8: JSON can smuggle in lone surrogates ("\\ud800")."""
    for key, value in d.record.items():
        try:
            canonical_json({key: value}).encode("utf-8")
        except UnicodeEncodeError as exc:
            message = f"field {key!r} holds text that is not valid Unicode ({exc.reason})"
            raise RecordError("bad_text", key, message) from exc


def check_problem(d: Draft, ctx: Context) -> None:
    value = d.record.get("problem")
    if value is None:
        raise RecordError("missing_field", "problem", "field 'problem' is missing")
    if not isinstance(value, str):
        raise RecordError("wrong_type", "problem", f"field 'problem' must be a string, got {_json_type(value)}")
    if not value.strip():
        raise RecordError("missing_field", "problem", "field 'problem' is empty")
    d.problem = value


def _string_list(d: Draft, key: str) -> list[str]:
    value = d.record.get(key)
    if value is None:
        return []
    if not isinstance(value, list):
        raise RecordError("wrong_type", key, f"field '{key}' must be a list of strings, got {_json_type(value)}")
    for i, item in enumerate(value):
        if not isinstance(item, str):
            raise RecordError("wrong_type", key, f"field '{key}[{i}]' must be a string, got {_json_type(item)}")
        if not item.strip():
            raise RecordError("wrong_type", key, f"field '{key}[{i}]' is an empty string")
    return list(value)


def check_lists(d: Draft, ctx: Context) -> None:
    d.options = _string_list(d, "options")
    d.videos = _string_list(d, "videos")
    d.images = _string_list(d, "images")


def check_problem_type(d: Draft, ctx: Context) -> None:
    raw = d.record.get("problem_type", "")
    if raw is None:
        raw = ""
    if not isinstance(raw, str):
        message = f"field 'problem_type' must be a string, got {_json_type(raw)}"
        raise RecordError("wrong_type", "problem_type", message)
    canonical = ctx.resolve_problem_type(raw)
    if canonical is None:
        what = "is missing" if not raw.strip() else f"{raw!r} is not a known problem type"
        raise RecordError("unknown_problem_type", "problem_type", f"field 'problem_type' {what}")
    d.problem_type_raw, d.problem_type = raw, canonical


def check_answer(d: Draft, ctx: Context) -> None:
    value = d.record.get("answer")
    if value is None:
        raise RecordError("missing_field", "answer", "field 'answer' is missing")
    if isinstance(value, bool):  # before int: bool is an int subclass
        raise RecordError(
            "wrong_type", "answer", f"field 'answer' is the JSON boolean {json.dumps(value)}; write it as a string"
        )
    if isinstance(value, (int, float)):
        # The reference scores a JSON number 0 on every path (spec §1.1); convert and say so.
        if isinstance(value, float) and not math.isfinite(value):
            raise RecordError("wrong_type", "answer", f"field 'answer' is the non-finite number {value}")
        d.answer = json.dumps(value)
        d.notes.append(f"answer: converted JSON number {d.answer} to the string {d.answer!r}")
        return
    if isinstance(value, (list, dict)):
        if _type_key(d.problem_type) not in GROUNDING_TYPES:
            raise RecordError(
                "wrong_type",
                "answer",
                f"field 'answer' is a JSON {_json_type(value)} but problem type {d.problem_type!r} expects a string",
            )
        d.answer = json.dumps(value, ensure_ascii=False)
        d.notes.append(f"answer: serialised JSON {_json_type(value)} to a string")
        return
    if not isinstance(value, str):
        raise RecordError("wrong_type", "answer", f"field 'answer' must be a string, got {_json_type(value)}")
    if not value.strip():
        raise RecordError("missing_field", "answer", "field 'answer' is empty")
    d.answer = value


def check_data_type(d: Draft, ctx: Context) -> None:
    if d.videos and d.images:
        message = "record has both 'images' and 'videos'; a sample carries one medium"
        raise RecordError("mixed_media", "images", message)
    d.data_type = "video" if d.videos else "image" if d.images else "text"
    declared = d.record.get("data_type")
    if declared is None:
        return
    if not isinstance(declared, str) or declared.strip().lower() not in ("video", "image", "text"):
        message = f"field 'data_type' must be video, image or text, got {declared!r}"
        raise RecordError("wrong_type", "data_type", message)
    if declared.strip().lower() != d.data_type:
        medium = {"video": "videos", "image": "images", "text": "media"}[declared.strip().lower()]
        actual = {"video": "videos", "image": "images", "text": "no media"}[d.data_type]
        raise RecordError(
            "data_type_mismatch",
            "data_type",
            f"field 'data_type' declares {declared!r} but the record has {actual}"
            + ("" if d.data_type == "text" else f", not {medium}"),
        )


def check_placeholders(d: Draft, ctx: Context) -> None:
    media = {"video": d.videos, "image": d.images}
    counts = {kind: d.problem.count(tag) for kind, tag in PLACEHOLDERS.items()}
    has = f"has {d.data_type} media only" if d.data_type != "text" else "has no media"
    if all(counts.values()):
        message = f"field 'problem' contains both <image> and <video> placeholders but the record {has}"
        raise RecordError("placeholder_mismatch", "problem", message)
    stray = [PLACEHOLDERS[k] for k, n in counts.items() if n and not media[k]]
    if stray:
        has = f"has {d.data_type}s" if d.data_type != "text" else "has no media"
        message = f"field 'problem' contains {stray[0]} placeholder(s) but the record {has}"
        raise RecordError("placeholder_mismatch", "problem", message)
    if d.data_type == "text":
        return
    tag, n_media, n_tags = PLACEHOLDERS[d.data_type], len(media[d.data_type]), counts[d.data_type]
    if n_tags == 0:
        # Without the placeholder the reference emits no visual item and crashes later (spec §1.4).
        d.problem = "\n".join([tag] * n_media + [d.problem])
        d.notes.append(f"problem: inserted {n_media} {tag} placeholder(s) at the start")
    elif n_tags != n_media:
        message = f"field 'problem' has {n_tags} {tag} placeholder(s) but the record has {n_media} {d.data_type}(s)"
        raise RecordError("placeholder_mismatch", "problem", message)


# An option's own label ("B. blue", "(B) blue", "B: blue") and an answer that is only a letter ("B", "(B)", "B.").
_OPTION_LABEL = re.compile(r"\s*[(\[]?([A-Za-z])[)\].:]\s*(.*)", re.DOTALL)
_ANSWER_LETTER = re.compile(r"\s*[(\[]?([A-Za-z])[)\]]?\s*[.:)]?\s*")


def _norm(text: str) -> str:
    return " ".join(text.lower().split()).strip(" .")


def option_labels(options: list[str]) -> dict[str, str]:
    """letter → option text: the options' own labels when all have one, else A, B, ... by position
    (as the prompt and the multiple-choice reward label them)."""
    matches = [_OPTION_LABEL.fullmatch(o) for o in options]
    if options and all(matches):
        return {m.group(1).upper(): m.group(2) for m in matches}
    return {chr(ord("A") + i): o for i, o in enumerate(options[:26])}


def check_options(d: Draft, ctx: Context) -> None:
    """A multiple-choice answer must name one of the options, by letter or by text; else the reward
    would pay for a letter no option has and nothing for the real ones."""
    if _type_key(d.problem_type) != MULTIPLE_CHOICE:
        return
    if d.record.get("options") is not None and not d.options:
        raise RecordError("too_few_options", "options", "multiple-choice field 'options' is empty")
    if len(d.options) == 1:
        message = "multiple-choice field 'options' has 1 option; at least 2 needed"
        raise RecordError("too_few_options", "options", message)
    letter = _ANSWER_LETTER.fullmatch(d.answer)
    if not d.options:  # options written in the question: the answer must at least be a letter
        if letter is None:
            raise RecordError("answer_not_an_option", "answer",
                              f"multiple-choice answer {d.answer!r} is not an option letter (and there are no 'options')")
        return
    labels = option_labels(d.options)
    if letter is not None and letter.group(1).upper() in labels:
        return
    labelled = _OPTION_LABEL.fullmatch(d.answer)
    if labelled is not None and labelled.group(1).upper() in labels:
        return  # "B. blue"
    if _norm(d.answer) in {_norm(text) for text in labels.values()}:
        return
    names = ", ".join(labels)
    raise RecordError("answer_not_an_option", "answer",
                      f"multiple-choice answer {d.answer!r} names none of the options ({names} or their text)")


def check_media(d: Draft, ctx: Context) -> None:
    """Resolve each path (against data_root, else the source file's directory), confine it, check it exists."""
    base = ctx.data_root if ctx.data_root is not None else ctx.base_dir
    root = ctx.data_root.resolve() if ctx.data_root is not None else None
    for key in ("videos", "images"):
        resolved: list[str] = []
        for i, path in enumerate(getattr(d, key)):
            name = f"field '{key}[{i}]'"
            try:
                full = (base / path).resolve()  # an absolute `path` replaces `base` in the join
                if root is not None and not full.is_relative_to(root):
                    message = f"{name} path {path!r} resolves outside data_root {root}"
                    raise RecordError("media_outside_root", key, message)
                if ctx.check_media_exists and not full.is_file():
                    if full.exists():  # a folder, a FIFO, a device: never a medium
                        raise RecordError("media_not_a_file", key, f"{name} path {full} is not a regular file")
                    raise RecordError("media_missing", key, f"{name} file {full} does not exist")
            except (OSError, ValueError) as exc:  # NUL bytes, names too long for the filesystem
                raise RecordError("bad_media_path", key, f"{name} path {path!r} is unusable: {exc}") from exc
            resolved.append(str(full))
        setattr(d, key, resolved)


def check_offline(d: Draft, ctx: Context) -> None:
    """Mixed offline-online training: a record that says it has a trajectory must carry its text, or the
    trainer would silently train it online only (EasyVideoR1 reads a missing one as "")."""
    flag = d.record.get("has_offline_trajectory")
    if ctx.offline_key is None or flag is None:
        return
    if not isinstance(flag, bool):
        message = f"field 'has_offline_trajectory' must be true or false, got {_json_type(flag)} {flag!r}"
        raise RecordError("wrong_type", "has_offline_trajectory", message)
    if not flag:
        return
    key = ctx.offline_key
    text = d.record.get(key)
    if text is None:
        raise RecordError("missing_field", key, f"field {key!r} is missing but 'has_offline_trajectory' is true")
    if not isinstance(text, str):
        raise RecordError("wrong_type", key, f"field {key!r} (the offline trajectory) must be a string, got {_json_type(text)}")
    if not text.strip():
        raise RecordError("missing_field", key, f"field {key!r} is empty but 'has_offline_trajectory' is true")


#: Order matters: types before derived checks, the (slow) filesystem last.
CHECKS: tuple[Callable[[Draft, Context], None], ...] = (
    check_text,
    check_problem,
    check_lists,
    check_problem_type,
    check_answer,
    check_data_type,
    check_placeholders,
    check_options,
    check_offline,
    check_media,
)


def validate_record(value: Any, ctx: Context) -> Draft:
    """Run every check on a parsed record; raises `RecordError` at the first broken rule."""
    if not isinstance(value, dict):
        raise RecordError("not_an_object", "", f"record is a JSON {_json_type(value)}, not an object")
    draft = Draft(record=value)
    for check in CHECKS:
        check(draft, ctx)
    return draft
