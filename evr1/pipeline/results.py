"""The small reference each stage hands the next: never tensors or frames, only where to find them."""

from __future__ import annotations

from pydantic import BaseModel, Field


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
