"""Readers for benchmarks' official release formats: Parquet, JSON (array or object of arrays), JSONL, CSV."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

from evr1.eval.items import ItemError


def read_table(path: str | Path) -> list[dict[str, Any]]:
    """Rows of a release file (or of every such file in a folder, in name order)."""
    path = Path(path)
    if path.is_dir():
        rows: list[dict[str, Any]] = []
        for p in sorted(path.iterdir()):
            if p.suffix in _READERS:
                rows.extend(read_table(p))
        if not rows:
            raise ItemError(f"{path}: no {', '.join(_READERS)} files in this folder")
        return rows
    reader = _READERS.get(path.suffix)
    if reader is None:
        raise ItemError(f"{path}: unsupported annotation format {path.suffix!r} (known: {', '.join(_READERS)})")
    return reader(path)


def task_files(path: str | Path, *, subdir: str = "json") -> list[Path]:
    """A release's per-task JSON files: `path` itself, or the `*.json` of `path/<subdir>/` or `path/`."""
    path = Path(path)
    if path.is_dir() and (path / subdir).is_dir():
        path = path / subdir
    return sorted(path.glob("*.json")) if path.is_dir() else [path]


def _parquet(path: Path) -> list[dict[str, Any]]:
    import pyarrow.parquet as pq

    return pq.read_table(path).to_pylist()


def _json(path: Path) -> list[dict[str, Any]]:
    data = json.loads(path.read_text(encoding="utf-8"))
    if isinstance(data, dict):  # {"split or task": [rows]} → rows tagged with their key
        return [{"_key": k, **row} for k, rows in data.items() for row in rows]
    if not isinstance(data, list):
        raise ItemError(f"{path}: expected a JSON array (or an object of arrays), got {type(data).__name__}")
    return data


def _jsonl(path: Path) -> list[dict[str, Any]]:
    out = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if line.strip():
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError as e:
                raise ItemError(f"{path}: line {n} is not JSON: {e}") from None
    return out


def _csv(path: Path) -> list[dict[str, Any]]:
    with path.open(newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


_READERS = {".parquet": _parquet, ".json": _json, ".jsonl": _jsonl, ".csv": _csv}
