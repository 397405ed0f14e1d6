"""The small reference each stage hands the next: never tensors or frames, only where to find them."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, Field

# `extra` entries that name something the stage wrote (besides `uri`).
OUTPUT_KEYS = ("rejects_uri", "table", "summary")


class StageResult(BaseModel):
    """What a stage wrote: its URI, a version or step, a content hash, and headline metrics."""

    stage: str
    uri: str
    version: int | None = None
    content_hash: str | None = None
    metrics: dict[str, float] = Field(default_factory=dict)
    extra: dict[str, str] = Field(default_factory=dict)

    def summary(self) -> str:
        parts = [f"{k}={v:g}" for k, v in self.metrics.items()]
        return f"{self.stage}: {self.uri}" + (f" ({', '.join(parts)})" if parts else "")

    def outputs(self) -> list[str]:
        """What the stage wrote on this machine's file system: `uri` and the output entries of `extra`
        (remote URIs such as s3:// are left out: their store says whether they exist)."""
        found = [self.uri, *(self.extra.get(k, "") for k in OUTPUT_KEYS)]
        return [p for p in found if p and "://" not in p]

    def missing_outputs(self) -> list[str]:
        """The outputs no longer there: a cached result that points at them must be computed again."""
        return [p for p in self.outputs() if not Path(p).exists()]
