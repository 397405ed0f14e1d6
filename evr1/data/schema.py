"""The accepted-sample model and the Arrow schemas of the Lance `samples` and `rejects` tables.

One place defines what a validated training/eval sample looks like, so that ingestion, the frame
cache, the trainer and eval all agree on column names and types.
"""

from __future__ import annotations

import json
from typing import Any, Literal

import pyarrow as pa
from pydantic import BaseModel, Field

DataType = Literal["video", "image", "text"]

#: The literal placeholder that marks where each medium goes in `problem` (EasyVideoR1 §1.4).
PLACEHOLDERS: dict[str, str] = {"video": "<video>", "image": "<image>"}

#: Record fields that become columns; every other field is passed through in `extra`.
CONSUMED_FIELDS = frozenset({"problem", "answer", "problem_type", "data_type", "options", "videos", "images"})

SAMPLES_SCHEMA = pa.schema(
    [
        pa.field("sample_id", pa.string(), nullable=False),
        pa.field("split", pa.string(), nullable=False),
        pa.field("problem", pa.string(), nullable=False),
        pa.field("answer", pa.string(), nullable=False),
        pa.field("problem_type", pa.string(), nullable=False),
        pa.field("problem_type_raw", pa.string(), nullable=False),
        pa.field("data_type", pa.string(), nullable=False),
        pa.field("options", pa.list_(pa.string())),
        pa.field("videos", pa.list_(pa.string())),
        pa.field("images", pa.list_(pa.string())),
        pa.field("extra", pa.string(), nullable=False),
        pa.field("source", pa.string(), nullable=False),
        pa.field("notes", pa.list_(pa.string())),
    ]
)

REJECTS_SCHEMA = pa.schema(
    [
        pa.field("source", pa.string(), nullable=False),
        pa.field("record_id", pa.string(), nullable=False),
        pa.field("field", pa.string(), nullable=False),
        pa.field("kind", pa.string(), nullable=False),
        pa.field("reason", pa.string(), nullable=False),
        pa.field("raw", pa.string(), nullable=False),
        pa.field("stage", pa.string(), nullable=False),
    ]
)


def canonical_json(value: Any) -> str:
    """Key-sorted, compact JSON: the same value always gives the same text (ids, hashes, `extra`)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=_json_default)


def _json_default(value: Any) -> Any:
    """Make Parquet/numpy values JSON-serialisable without losing them."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        return {"__bytes_hex__": bytes(value).hex()}
    for attr in ("tolist", "isoformat"):  # numpy scalars/arrays, dates and timestamps
        if hasattr(value, attr):
            return getattr(value, attr)()
    return str(value)


class Sample(BaseModel):
    """One accepted sample: a row of the Lance `samples` table.

    `extra` holds every record field not consumed into a column (including `problem_id`);
    `notes` records every change ingestion made to the record (e.g. an inserted placeholder).
    """

    sample_id: str
    split: str
    problem: str
    answer: str
    problem_type: str
    problem_type_raw: str
    data_type: DataType
    options: list[str] = Field(default_factory=list)
    videos: list[str] = Field(default_factory=list)
    images: list[str] = Field(default_factory=list)
    extra: dict[str, Any] = Field(default_factory=dict)
    source: str
    notes: list[str] = Field(default_factory=list)

    def to_row(self) -> dict[str, Any]:
        """The Arrow row: `extra` serialised to canonical JSON."""
        row = self.model_dump()
        row["extra"] = canonical_json(self.extra)
        return row


class Reject(BaseModel):
    """One rejected record: a row of the Lance `rejects` table. Nothing is lost: `raw` is verbatim."""

    source: str
    record_id: str = ""
    field: str = ""
    kind: str
    reason: str
    raw: str
    stage: str = "ingest"
