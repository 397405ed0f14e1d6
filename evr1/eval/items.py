"""One benchmark record → the canonical item every prompt, scorer and metric reads.

Annotation files come in EasyVideoR1's schema (`problem`, `options`, `solution`, `path`,
`problem_type`, `problem_id`, plus per-benchmark extras), with quirks the loaders absorb here, once:
`options` is a list, the *repr* of a list, `None` or the string "None"; option labels are "A. x" or
"A: x"; the ground truth sits in `<answer>…</answer>` or, for Charades-STA, in a `<think>` block
followed by a stray placeholder token; paths carry `./` prefixes. `normalise` is idempotent, so
`evr1.eval.score` accepts a record exactly as it appears in a file or an item already normalised.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Mapping, Sequence
from typing import Any

_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL | re.IGNORECASE)
_THINK = re.compile(r"<think>(.*?)</think>", re.DOTALL | re.IGNORECASE)
_LABEL = re.compile(r"^\s*\(?([A-Z])\s*[.:)]\s?")
LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
OVO_TYPES = ("rec", "ssr", "crr")  # OVO-Bench's forward tasks keep EasyVideoR1's upper-case type names


class ItemError(ValueError):
    """A record that cannot be used; the message names the benchmark, the record and the field."""


def parse_options(value: Any, *, where: str = "record") -> list[str]:
    """`options` as a list of strings, whatever shape the file stored it in."""
    if value is None:
        return []
    if isinstance(value, str):
        text = value.strip()
        if text in ("", "None", "null", "[]"):
            return []
        try:
            value = ast.literal_eval(text)
        except (ValueError, SyntaxError):
            raise ItemError(f"{where}: field 'options' is neither a list nor the text of one: {text[:80]!r}") from None
    if not isinstance(value, Sequence) or isinstance(value, str):
        raise ItemError(f"{where}: field 'options' must be a list, got {type(value).__name__}")
    return [str(o) for o in value]


def option_letter(option: str, index: int) -> str:
    """The label of an option ("A. x", "A: x", "(A) x"), else its position's letter."""
    m = _LABEL.match(option)
    return m.group(1) if m else LETTERS[index]


def option_text(option: str) -> str:
    """The option without its label: "B. ketose" → "ketose"."""
    m = _LABEL.match(option)
    return option[m.end():].strip() if m else option.strip()


def answer_of(solution: Any) -> str:
    """The ground truth inside a solution: the last `<answer>` block, else a `<think>` block
    (Charades-STA's malformed wrapper), else the whole text, trimmed."""
    text = "" if solution is None else str(solution)
    found = _ANSWER.findall(text)
    if found:
        return found[-1].strip()
    found = _THINK.findall(text)
    if found:
        return found[-1].strip()
    return text.strip()


def normalise(record: Mapping[str, Any], *, benchmark: str = "", index: int | None = None,
              id_fields: Sequence[str] = ("problem_id",)) -> dict[str, Any]:
    """The canonical item: the record's own fields plus `id`, `options` (list), `letters`,
    `option_texts`, `gt` (the ground truth from `solution`), `problem_type` (lower-case, trimmed) and `video` (relative path)."""
    if not isinstance(record, Mapping):
        raise ItemError(f"{benchmark or 'benchmark'} record {index}: expected an object, got {type(record).__name__}")
    pid = record.get("id")
    if pid is None:
        parts = [str(record[f]) for f in id_fields if record.get(f) is not None]
        pid = "/".join(parts) if parts else index
    where = f"{benchmark or 'benchmark'} record {pid!r}"
    item = dict(record)
    item["id"] = str(pid)
    options = parse_options(record.get("options"), where=where)
    item["options"] = options
    item["letters"] = [option_letter(o, i) for i, o in enumerate(options)]
    item["option_texts"] = [option_text(o) for o in options]
    if "gt" not in item:
        item["gt"] = answer_of(record.get("solution"))
    ptype = record.get("problem_type")
    if not isinstance(ptype, str) or not ptype.strip():
        raise ItemError(f"{where}: field 'problem_type' is missing or empty")
    ptype = ptype.strip().lower()
    item["problem_type"] = ptype.upper() if ptype in OVO_TYPES else ptype
    path = record.get("path") or record.get("video")
    if not isinstance(path, str) or not path.strip():
        raise ItemError(f"{where}: field 'path' is missing or empty")
    item["video"] = strip_dot(path)
    if record.get("image_path"):
        item["image"] = strip_dot(str(record["image_path"]))
    return item


def strip_dot(path: str) -> str:
    """'./videos/x.mp4' → 'videos/x.mp4' (the reference's normalisation)."""
    path = path.strip()
    while path.startswith("./"):
        path = path[2:]
    return path


def unique_ids(items: list[dict[str, Any]], *, benchmark: str) -> list[dict[str, Any]]:
    """Results are keyed by `id`, so ids must be unique: a repeated one gets `#k` appended (and says so)."""
    seen: dict[str, int] = {}
    for item in items:
        k = seen.get(item["id"], 0)
        seen[item["id"]] = k + 1
        if k:
            item["id"] = f"{item['id']}#{k}"
    return items
