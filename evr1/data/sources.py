"""Read JSONL, JSON-array and Parquet files into raw records, one per line / element / row.

Parsing never raises for a bad record: each line (or array element) is decoded and parsed on its
own, so a byte that is not UTF-8, a value nested too deep for the parser or a number too long to
convert becomes a `RawRecord` with `error` set, and ingestion rejects it with its position while the
rest of the file is read. A UTF-8 byte-order mark is skipped. Only an unreadable file raises.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from evr1.data.schema import canonical_json

_MISSING = object()
_BOM = "\ufeff"
#: Deeper values are rejected: they parse, but every later json.dumps / pyarrow walk could overflow.
MAX_DEPTH = 64


class DatasetSourceError(ValueError):
    """A dataset source that cannot be read at all (missing, not a regular file, unsupported format)."""


@dataclass(frozen=True)
class RawRecord:
    """One input record before validation.

    `position` counts from 1 in every format: the line number for JSON lines (`unit` "line"), the
    record's place in a JSON array ("record": the first element is record 1) and the row's place in a
    Parquet file ("row"). `source` writes a line as `file:3`, as editors and compilers do, and an
    array record or a row as `file#3`, so neither reads as the other. `value` is the parsed object
    (any JSON type), or `_MISSING` with `error` set when the text did not parse.
    """

    path: Path
    position: int
    raw: str
    value: Any = _MISSING
    error: str = ""
    unit: str = "line"

    @property
    def source(self) -> str:
        return f"{self.path}{':' if self.unit == 'line' else '#'}{self.position}"

    @property
    def where(self) -> str:
        """What `position` counts, in words: "line 3", "record 3 of the JSON array", "row 3 of the Parquet file"."""
        return {"line": f"line {self.position}", "record": f"record {self.position} of the JSON array",
                "row": f"row {self.position} of the Parquet file"}.get(self.unit, f"{self.unit} {self.position}")

    @property
    def parsed(self) -> bool:
        return self.value is not _MISSING


@dataclass
class SourceFiles:
    """The files a list of sources expands to, and the files found in folders but not read."""

    files: list[Path] = field(default_factory=list)
    skipped: list[Path] = field(default_factory=list)


_JSON_WHITESPACE = " \t\r\n"


def _raw_text(value: Any) -> str:
    """A record re-serialised for the rejects table; escaped when it holds text UTF-8 cannot store."""
    text = canonical_json(value)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)  # ASCII escapes
    return text


def _depth(value: Any) -> int:
    """Nesting depth of a parsed JSON value (a scalar is 0), without recursion."""
    deepest, stack = 0, [(value, 0)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, (dict, list)):
            deepest = max(deepest, depth + 1)
            if depth + 1 > MAX_DEPTH:
                return deepest
            stack.extend((child, depth + 1) for child in (node.values() if isinstance(node, dict) else node))
    return deepest


def _undecodable(text: str) -> str | None:
    """Why text decoded with surrogateescape is not UTF-8 (naming the first bad byte), or None.

    Decoding valid UTF-8 never yields a lone surrogate, so a strict re-encode (C speed) finds them."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return f"not valid UTF-8 (byte 0x{ord(text[exc.start]) - 0xDC00:02x} at column {exc.start + 1})"
    return None


def parse_record(path: Path, position: int, text: str, unit: str = "line") -> RawRecord:
    """Parse one record's text; any failure becomes a RawRecord with `error` (never an exception)."""
    bad = _undecodable(text)
    if bad is not None:
        raw = text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
        return RawRecord(path, position, raw, error=bad, unit=unit)
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        return RawRecord(path, position, text, error=f"malformed JSON ({exc.msg} at column {exc.colno})", unit=unit)
    except RecursionError:
        return RawRecord(path, position, text, error="malformed JSON (nested too deep to parse)", unit=unit)
    except ValueError as exc:  # e.g. an integer longer than Python converts (sys.int_info)
        return RawRecord(path, position, text, error=f"malformed JSON ({str(exc).split(';')[0]})", unit=unit)
    # Depth is at most the number of opening brackets: walk the value only when that could exceed the limit.
    if text.count("[") + text.count("{") > MAX_DEPTH and _depth(value) > MAX_DEPTH:
        return RawRecord(path, position, text, error=f"JSON value nested more than {MAX_DEPTH} levels deep",
                         unit=unit)
    return RawRecord(path, position, text, value, unit=unit)


def _read_text(path: Path) -> str:
    """The file as text: undecodable bytes kept as surrogates (rejected per record), BOM dropped."""
    return path.read_bytes().decode("utf-8", "surrogateescape").removeprefix(_BOM)


def _read_jsonl_text(path: Path, text: str) -> Iterator[RawRecord]:
    # Split on "\n" only: str.splitlines() would also split on \x1c-\x1e, \x85 and \u2028 inside a record.
    for lineno, line in enumerate(text.split("\n"), start=1):
        line = line.removesuffix("\r")
        if lineno == 1:
            line = line.removeprefix(_BOM)
        if not line.strip(_JSON_WHITESPACE):
            continue  # blank lines are layout, not records
        yield parse_record(path, lineno, line)


def read_jsonl(path: Path) -> Iterator[RawRecord]:
    """One record per non-blank line; line numbers are 1-based."""
    yield from _read_jsonl_text(path, _read_text(path))


def split_array(text: str) -> list[str] | None:
    """The element texts of a top-level JSON array, found by bracket depth outside strings, so each
    element parses (and fails) alone; None when `text` is not an array."""
    body = text.strip(_JSON_WHITESPACE)
    if not body.startswith("["):
        return None
    elements: list[str] = []
    depth, start, in_string, escaped = 0, 1, False, False
    for i, char in enumerate(body):
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "[{":
            depth += 1
        elif char in "]}":
            depth -= 1
            if depth == 0:
                last = body[start:i]
                if last.strip(_JSON_WHITESPACE) or elements:
                    elements.append(last)
                if body[i + 1 :].strip(_JSON_WHITESPACE):
                    return None  # text after the array: not one array
                return elements
        elif char == "," and depth == 1:
            elements.append(body[start:i])
            start = i + 1
    return None  # unterminated: let the JSON-lines reader report each line


def read_json(path: Path) -> Iterator[RawRecord]:
    """A JSON array (record N = its N-th element, from 1), each element parsed alone; anything else is read
    as JSON lines.

    The fallback matches the Hugging Face "json" builder EasyVideoR1 uses, which accepts JSON-lines
    content in a `.json` file.
    """
    text = _read_text(path)
    elements = split_array(text)
    if elements is None:
        yield from _read_jsonl_text(path, text)
        return
    for number, element in enumerate(elements, start=1):
        rec = parse_record(path, number, element.strip(_JSON_WHITESPACE), unit="record")
        yield RawRecord(path, number, _raw_text(rec.value), rec.value, unit="record") if rec.parsed else rec


def read_parquet(path: Path) -> Iterator[RawRecord]:
    """One record per row (row N, from 1); nulls are dropped so they read as absent fields."""
    number = 0
    for batch in pq.ParquetFile(path).iter_batches(batch_size=4096):
        for row in batch.to_pylist():
            number += 1
            yield RawRecord(path, number, _raw_text(row), {k: v for k, v in row.items() if v is not None},
                            unit="row")


READERS: dict[str, Callable[[Path], Iterator[RawRecord]]] = {
    ".jsonl": read_jsonl,
    ".json": read_json,
    ".parquet": read_parquet,
}


def _is_regular(path: Path) -> bool:
    try:
        return stat.S_ISREG(path.stat().st_mode)
    except OSError:
        return False


def check_source(path: Path) -> None:
    """Raise DatasetSourceError (one line naming the path) unless `path` is a readable data file."""
    if not os.path.lexists(path):
        raise DatasetSourceError(f"dataset source {path} does not exist")
    if not _is_regular(path):
        raise DatasetSourceError(f"dataset source {path} is not a regular file")
    if path.suffix not in READERS:
        raise DatasetSourceError(
            f"dataset source {path}: unsupported extension {path.suffix!r} (use {', '.join(sorted(READERS))})")


def collect_sources(sources: Sequence[str | Path]) -> SourceFiles:
    """Files in the order given; a folder contributes its supported files recursively, sorted by path.

    Files in folders that are not datasets (other extensions, hidden files, FIFOs) are listed in
    `skipped`, so the report can say how many were not read.
    """
    found = SourceFiles()
    for source in sources:
        path = Path(source)
        if path.is_dir():
            for child in sorted(p for p in path.rglob("*") if not p.is_dir()):
                hidden = any(part.startswith(".") for part in child.relative_to(path).parts)
                ok = child.suffix in READERS and not hidden and _is_regular(child)
                (found.files if ok else found.skipped).append(child)
        else:
            check_source(path)
            found.files.append(path)
    return found


def expand_sources(sources: Sequence[str | Path]) -> list[Path]:
    """The dataset files of `sources` (see collect_sources)."""
    return collect_sources(sources).files


def read_records(path: Path) -> list[RawRecord]:
    """All records of one file; raises (naming the file) only when the file itself cannot be read."""
    try:
        return list(READERS[path.suffix](path))
    except (OSError, ValueError) as exc:
        raise DatasetSourceError(f"cannot read dataset source {path}: {exc}") from exc
