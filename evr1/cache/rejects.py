"""Media the frame cache could not read, as a Lance table beside the frames: one row per distinct
media path and reason, the records that asked for it joined, so reruns do not grow it."""

from __future__ import annotations

import lance
import pyarrow as pa

from evr1.cache.store import open_table

REJECTS_SCHEMA = pa.schema(
    [
        pa.field("record_id", pa.string()),
        pa.field("path", pa.string()),
        pa.field("stage", pa.string()),
        pa.field("reason", pa.string()),
    ]
)


def distinct_rejects(rejects: list[dict]) -> list[dict]:
    """One row per (media path, reason): the records that asked for that media joined in `record_id`."""
    grouped: dict[tuple[str, str], dict] = {}
    for r in rejects:
        row = grouped.setdefault((r["path"], r["reason"]), {**r, "record_id": []})
        if r["record_id"] not in row["record_id"]:
            row["record_id"].append(r["record_id"])
    return [{**row, "record_id": ", ".join(row["record_id"])} for row in grouped.values()]


def write_rejects(uri: str, rejects: list[dict]) -> int | None:
    """Add reject rows (record_id, path, stage, reason) to a Lance table, creating it if needed.

    One row per distinct media and reason: a (path, reason) already in the table is not added again,
    so re-running cache, train and eval does not grow it. An existing table with more columns (e.g.
    ingest's rejects) gets nulls in the ones we lack.
    """
    rows = distinct_rejects(rejects)
    if not rows:
        return None
    existing = open_table(uri)
    schema = existing.schema if existing is not None else REJECTS_SCHEMA
    missing = [f.name for f in REJECTS_SCHEMA if f.name not in schema.names]
    if missing:
        raise ValueError(f"rejects table {uri} lacks columns {missing}")
    if existing is not None:
        seen = {(r["path"], r["reason"]) for r in existing.to_table(columns=["path", "reason"]).to_pylist()}
        rows = [r for r in rows if (r["path"], r["reason"]) not in seen]
        if not rows:
            return None
    table = pa.Table.from_pylist([{n: r.get(n) for n in schema.names} for r in rows], schema=schema)
    return lance.write_dataset(table, uri, mode="append" if existing is not None else "create").version
