"""Where the time to the first training step goes, phase by phase, from `progress.TIMELINE`.

`evr1 run --timings` prints `report(...)` at the end of the run; every run writes the same spans to
`<run folder>/timings.json`. The spans come from the phases the command, the flow and the train stage
open (`progress.phase`, `progress.lead_in`) and from the first metrics of the training
(`progress.TrainingProgress`): start-up, Prefect, each stage, Ray, the actors, the warm-up, the
validation before RL and the first GRPO step with its parts.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from evr1.tracking.progress import Span

FIRST_STEP = "first GRPO step"


def first_step(timeline: Sequence[Span]) -> Span | None:
    return next((s for s in timeline if s.name.startswith(FIRST_STEP)), None)


def report(timeline: Sequence[Span], *, width: int = 64) -> list[str]:
    """Lines: every span that started before the first training step ended, indented by nesting,
    its seconds (a span still running then is cut there), the first step's parts beside it, and the
    total; without a training step, every span and the total of the top-level ones."""
    if not timeline:
        return []
    first = first_step(timeline)
    cutoff = first.end if first is not None and first.end is not None else None
    t0 = min(s.start for s in timeline)
    shown = [s for s in timeline if cutoff is None or s.start < cutoff]
    total = (cutoff if cutoff is not None else max((s.end or s.start) for s in timeline)) - t0
    head = (f"time to the first training step: {total:.1f} s, phase by phase" if cutoff is not None
            else f"phases of this run: {total:.1f} s (no training step ran)")
    lines = [head]
    width = min(max([width, *(2 * (s.depth + 1) + len(s.name) + 2 for s in shown)]), 100)
    for s in shown:
        end = s.end if s.end is not None else cutoff
        if end is None:
            continue
        if cutoff is not None:
            end = min(end, cutoff)
        cut = cutoff is not None and s.end is not None and s.end > cutoff
        name = "  " * (s.depth + 1) + s.name + (" (until the first step)" if cut else "")
        line = f"{name:<{width}} {end - s.start:7.1f} s"
        parts = s.detail.get("parts")
        if parts:
            line += "   (" + ", ".join(f"{k.replace('_', ' ')} {v:.1f} s" for k, v in parts.items()) + ")"
        lines.append(line)
    return lines


def write(timeline: Sequence[Span], path: Path) -> Path:
    """The spans as JSON (name, start, end, seconds, depth, detail): what a later look can read."""
    path.parent.mkdir(parents=True, exist_ok=True)
    rows = [{"name": s.name, "start": s.start, "end": s.end, "seconds": s.seconds, "depth": s.depth,
             "detail": s.detail} for s in timeline]
    first = first_step(timeline)
    data = {"spans": rows, "to_first_step_s": (first.end - min(s.start for s in timeline))
            if first is not None and first.end is not None else None}
    path.write_text(json.dumps(data, indent=1, default=str))
    return path
