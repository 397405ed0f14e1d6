"""Subtitles for benchmarks that offer them (Video-MME `.srt`, LongVideoBench and VideoMathQA JSON)."""

from __future__ import annotations

import json
from pathlib import Path

import srt


def srt_text(path: Path, *, start: float | None = None, end: float | None = None) -> str | None:
    """The subtitle lines of an `.srt` file (those overlapping [start, end] seconds if given), one per
    line; None when the file does not exist, so a missing subtitle is "no subtitles", not an error."""
    if not Path(path).is_file():
        return None
    subs = srt.parse(Path(path).read_text(encoding="utf-8", errors="replace"))
    lines = [s.content.replace("\n", " ").strip() for s in subs
             if (start is None or s.end.total_seconds() >= start) and (end is None or s.start.total_seconds() <= end)]
    return "\n".join(line for line in lines if line) or None


def json_text(path: Path, *, key: str = "line") -> str | None:
    """Subtitle lines from a JSON list of {"start", "end", key} objects (LongVideoBench's format)."""
    if not Path(path).is_file():
        return None
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    lines = [str(d.get(key) or d.get("text") or "").strip() for d in data if isinstance(d, dict)]
    return "\n".join(line for line in lines if line) or None
