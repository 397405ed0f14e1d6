"""Read JSONL, JSON-array and Parquet files into raw records, one per line / element / row.

Parsing never raises for a bad record: a malformed line becomes a `RawRecord` with `error` set, so
ingestion can reject it with its line number. Only an unreadable file raises.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from evr1.data.schema import canonical_json

_MISSING = object()


@dataclass(frozen=True)
class RawRecord:
    """One input record before validation.

    `position` is the 1-based line number for JSONL and the 0-based element/row index for JSON
    arrays and Parquet (the index you would use in `data[i]` / `table[i]`). `value` is the parsed
    object (any JSON type), or `_MISSING` with `error` set when the text did not parse.
    """

    path: Path
    position: int
    raw: str
    value: Any = _MISSING
    error: str = ""

    @property
    def source(self) -> str:
        return f"{self.path}:{self.position}"

    @property
    def parsed(self) -> bool:
        return self.value is not _MISSING


_JSON_WHITESPACE = " \t\r\n"


def _raw_text(value: Any) -> str:
    """A record re-serialised for the rejects table; escaped when it holds text UTF-8 cannot store."""
    text = canonical_json(value)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)  # ASCII escapes
    return text


def _read_jsonl_text(path: Path, text: str) -> Iterator[RawRecord]:
    # Split on "\n" only: str.splitlines() would also split on \x1c-\x1e, \x85 and \u2028 inside a record.
    for lineno, line in enumerate(text.split("\n"), start=1):
        line = line.removesuffix("\r")
        if not line.strip(_JSON_WHITESPACE):
            continue  # blank lines are layout, not records
        try:
            yield RawRecord(path, lineno, line, json.loads(line))
        except json.JSONDecodeError as exc:
            yield RawRecord(path, lineno, line, error=f"malformed JSON ({exc.msg} at column {exc.colno})")


def read_jsonl(path: Path) -> Iterator[RawRecord]:
    """One record per non-blank line; line numbers are 1-based."""
    yield from _read_jsonl_text(path, path.read_text(encoding="utf-8"))


def read_json(path: Path) -> Iterator[RawRecord]:
    """A JSON array (index = position); anything else is read as JSON lines.

    The fallback matches the Hugging Face "json" builder EasyVideoR1 uses, which accepts JSON-lines
    content in a `.json` file.
    """
    text = path.read_text(encoding="utf-8")
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        data = None
    if isinstance(data, list):
        for index, value in enumerate(data):
            yield RawRecord(path, index, _raw_text(value), value)
    else:
        yield from _read_jsonl_text(path, text)


def read_parquet(path: Path) -> Iterator[RawRecord]:
    """One record per row (0-based index); nulls are dropped so they read as absent fields."""
    index = 0
    for batch in pq.ParquetFile(path).iter_batches(batch_size=4096):
        for row in batch.to_pylist():
            yield RawRecord(path, index, _raw_text(row), {k: v for k, v in row.items() if v is not None})
            index += 1


READERS: dict[str, Callable[[Path], Iterator[RawRecord]]] = {
    ".jsonl": read_jsonl,
    ".json": read_json,
    ".parquet": read_parquet,
}


def expand_sources(sources: Sequence[str | Path]) -> list[Path]:
    """Files in the order given; a directory contributes its supported files, sorted by name."""
    files: list[Path] = []
    for source in sources:
        path = Path(source)
        if path.is_dir():
            files.extend(sorted(p for p in path.iterdir() if p.suffix in READERS and p.is_file()))
        elif not path.is_file():
            raise FileNotFoundError(f"dataset source {path} does not exist")
        elif path.suffix not in READERS:
            raise ValueError(f"dataset source {path}: unsupported extension {path.suffix!r} (use {sorted(READERS)})")
        else:
            files.append(path)
    return files


def read_records(path: Path) -> list[RawRecord]:
    """All records of one file; raises (naming the file) only when the file itself cannot be read."""
    try:
        return list(READERS[path.suffix](path))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise ValueError(f"cannot read dataset source {path}: {exc}") from exc
