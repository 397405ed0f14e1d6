"""The small value types every part of evaluation shares: how to ask, what was asked, how one answer
scores, what a benchmark aggregates to.

They sit at the bottom of `evr1.eval` so that the scoring profiles, metrics and prompt builders can
use them without importing the benchmark registry that dispatches to them (which would be a circle).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

PROFILES = ("official", "easyvideor1")


@dataclass(frozen=True)
class Prompted:
    """What the engine needs for one item: the prompt text with placeholders and the media paths."""

    text: str
    videos: Sequence[str] = ()
    images: Sequence[str] = ()
    # Per video: (start, end) seconds of the clip to sample from, or None for the whole video.
    segments: Sequence[tuple[float | None, float | None] | None] = ()


@dataclass(frozen=True)
class PromptContext:
    """How to ask: the scoring profile's prompt style, the model family's style, thinking, subtitles.

    `family` is "qwen3" (Qwen3-VL, Qwen3.5) or "qwen25" (Qwen2-VL, Qwen2.5-VL); `subtitles` is the
    subtitle text to include (None: none); `template` is the run's `rollout.template` (held-out split).
    """

    profile: str = "official"
    family: str = "qwen3"
    thinking: bool = False
    subtitles: str | None = None
    template: str | None = None


class PromptFn(Protocol):
    def __call__(self, item: Mapping[str, Any], ctx: PromptContext) -> str: ...


ItemScorer = Callable[[str, Mapping[str, Any]], dict[str, Any]]  # (output, item) → {"score": …, "pred": …}


@dataclass(frozen=True)
class Report:
    """A benchmark's aggregate: the headline metric, its value in [0, 1] and the breakdowns."""

    metric: str
    value: float
    parts: dict[str, float] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)


Aggregate = Callable[[Sequence[tuple[Mapping[str, Any], Mapping[str, Any]]]], Report]  # [(item, result)] → Report
