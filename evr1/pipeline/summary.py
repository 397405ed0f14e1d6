"""The run summary: one markdown table a person reads first after a flow run.

Each stage: whether it ran in this attempt, came from the cache, was done by an earlier attempt of
the same flow run, or failed; its duration; its headline metrics; its outputs; and where the MLflow
run is. Built from plain rows, so any orchestrator (or none) can fill them in.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

# How a stage's state reads in the summary.
STATUS_TEXT: dict[str, str] = {
    "ran": "ran",
    "cached": "cached",
    "rebuilt": "ran again (its cached outputs were gone)",
    "earlier": "done in an earlier attempt",
    "failed": "**failed**",
    "skipped": "not reached",
}


@dataclass
class StageRow:
    """One stage of a run as the summary shows it."""

    name: str
    status: str                       # a key of STATUS_TEXT
    seconds: float | None = None
    metrics: Mapping[str, float] = field(default_factory=dict)
    outputs: Sequence[str] = ()
    note: str = ""                    # why it failed, or what it did ("resumed at step 3")

    def __post_init__(self):
        if self.status not in STATUS_TEXT:
            raise ValueError(f"stage {self.name!r}: status {self.status!r} is not one of {sorted(STATUS_TEXT)}")


def _cell(text: str, limit: int = 200) -> str:
    """One line of text that cannot break the table (pipes escaped, newlines joined, cut at `limit`)."""
    one = " ".join(text.split()).replace("|", "\\|")
    return one if len(one) <= limit else one[: limit - 1] + "…"


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "–"
    return f"{seconds:.1f} s" if seconds < 120 else f"{seconds / 60:.1f} min"


def _metrics(metrics: Mapping[str, float], limit: int = 4) -> str:
    shown = [f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}" for k, v in list(metrics.items())[:limit]]
    return ", ".join(shown) + (" …" if len(metrics) > limit else "")


def render(title: str, rows: Sequence[StageRow], *, links: Mapping[str, str] = {}) -> str:
    """The summary as markdown: a heading, the stage table, then the links (MLflow run, flow run)."""
    lines = [f"# {title}", "", "| stage | status | duration | headline | outputs |", "| --- | --- | --- | --- | --- |"]
    for r in rows:
        outputs = "<br>".join(f"`{o}`" for o in r.outputs if o)
        status = STATUS_TEXT[r.status] + (f": {_cell(r.note)}" if r.note else "")
        lines.append(f"| {r.name} | {status} | {_duration(r.seconds)} | {_metrics(r.metrics)} | {outputs} |")
    ran = sum(r.seconds or 0.0 for r in rows if r.status in ("ran", "rebuilt"))
    counts = {s: sum(r.status == s for r in rows) for s in STATUS_TEXT}
    lines += ["", f"{counts['ran'] + counts['rebuilt']} ran ({_duration(ran)}), {counts['cached'] + counts['earlier']} reused, "
                  f"{counts['failed']} failed."]
    if links:
        lines += [""] + [f"- {name}: {url}" for name, url in links.items()]
    return "\n".join(lines) + "\n"


def write(run_dir: Path, markdown: str) -> Path:
    """`summary.md` in the run folder (replaced by each flow run)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    out = run_dir / "summary.md"
    tmp = out.with_suffix(".md.tmp")
    tmp.write_text(markdown)
    tmp.replace(out)
    return out


def mlflow_run_url(ui_base: str | None, experiment_id: str, run_id: str) -> str:
    """The MLflow UI page of a run, or `runs:/<id>` when no UI address is known."""
    if not ui_base:
        return f"runs:/{run_id} (experiment {experiment_id})"
    # workflowType: MLflow 3 opens a run link in its GenAI view unless told this is model training.
    return f"{ui_base.rstrip('/')}/#/experiments/{experiment_id}/runs/{run_id}?workflowType=machine_learning"
