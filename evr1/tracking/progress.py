"""Progress of a long stage, shown wherever someone is watching.

A stage calls `track(name, total, unit)` and then `update(done, **fields)`; what happens with that is
decided elsewhere: a rich bar on a terminal (nothing when stderr is not a TTY, so CI logs stay
readable), plus any sink a caller installed with `sinks()` (the Prefect tasks add one that keeps a
progress artifact up to date). `evr1` never imports an orchestrator: sinks are plain callables.
"""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Protocol


class Bar(Protocol):
    """One progress display: `update` with the units done so far, `close` once at the end."""

    def update(self, done: float, **fields: float | str) -> None: ...

    def close(self, done: float | None = None) -> None: ...


# A sink makes a Bar for (name, total, unit); installed per thread-group by `sinks()`.
Sink = Callable[[str, float, str], Bar]
_SINKS: list[Sink] = []
_LOCK = threading.Lock()


@contextlib.contextmanager
def sinks(*extra: Sink) -> Iterator[None]:
    """Every `track` opened inside the block also reports to `extra` (e.g. a Prefect progress artifact)."""
    with _LOCK:
        _SINKS.extend(extra)
    try:
        yield
    finally:
        with _LOCK:
            for s in extra:
                _SINKS.remove(s)


def describe(fields: dict[str, float | str]) -> str:
    """`reward 0.52 · 1.3 s/step`-style text for the fields a stage passes along."""
    return " · ".join(f"{k} {v:.3g}" if isinstance(v, float) else f"{k} {v}" for k, v in fields.items())


class _Rich:
    """A rich bar on stderr, with the stage's fields (reward, step time, score so far) beside it."""

    def __init__(self, name: str, total: float, unit: str):
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self._p = Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                           TextColumn(unit), TimeElapsedColumn(), TextColumn("{task.fields[info]}"),
                           console=Console(stderr=True), transient=False)
        self._p.start()
        _LIVE_BARS.append(self)
        self._task = self._p.add_task(name, total=total, info="")

    def update(self, done: float, **fields: float | str) -> None:
        self._p.update(self._task, completed=done, info=describe(fields))

    def close(self, done: float | None = None) -> None:
        if done is not None:
            self._p.update(self._task, completed=done)
        self._p.stop()
        with contextlib.suppress(ValueError):
            _LIVE_BARS.remove(self)


class _Fanout:
    """Several bars fed as one; a failing display never fails the stage."""

    def __init__(self, bars: list[Bar], total: float):
        self.bars, self.total, self.done = bars, total, 0.0

    def update(self, done: float, **fields: float | str) -> None:
        self.done = done
        for b in self.bars:
            with contextlib.suppress(Exception):
                b.update(done, **fields)

    def close(self, done: float | None = None) -> None:
        for b in self.bars:
            with contextlib.suppress(Exception):
                b.close(done)


def terminal() -> bool:
    return sys.stderr.isatty()


# --- phases: stretches of work without a bar (Prefect start, Ray start, actors loading) -----------------

QUIET_S = 2.0  # a silent phase at least this long leaves a line with its duration on the terminal


@dataclass
class Span:
    """One timed stretch: `name` from `start` to `end` (epoch seconds; None while it runs), `depth` the
    phases it is nested in, `detail` what a report adds beside it (e.g. the first step's parts)."""

    name: str
    start: float
    end: float | None = None
    depth: int = 0
    detail: dict = field(default_factory=dict)
    shown: bool = False  # a bar was drawn while it ran (then it was not silent)

    @property
    def seconds(self) -> float:
        return (self.end if self.end is not None else time.time()) - self.start


TIMELINE: list[Span] = []  # this process's phases and marks, in order of their start
_OPEN: list[Span] = []  # phases running now, innermost last
_LEAD: list[Span] = []  # an open-ended phase (`lead_in`) until the next phase or bar starts
_STATUS: dict = {}  # the terminal's status line: {"live": rich Status, "span": Span}
_LIVE_BARS: list = []  # rich bars drawn now: no status line beside them (one live display at a time)


def _status_show(span: Span) -> None:
    """The spinner line for `span` on a terminal (replacing any other)."""
    if not terminal() or _LIVE_BARS:
        return
    from rich.console import Console

    with _LOCK:
        current = _STATUS.get("live")
        if current is not None:
            current.update(f"[bold]{span.name}[/bold] …")
            _STATUS["span"] = span
            return
        live = Console(stderr=True).status(f"[bold]{span.name}[/bold] …", spinner="dots")
        live.start()
        _STATUS.update(live=live, span=span)


def _status_stop() -> None:
    with _LOCK:
        live = _STATUS.pop("live", None)
        _STATUS.pop("span", None)
    if live is not None:
        with contextlib.suppress(Exception):
            live.stop()


def _done_line(span: Span) -> None:
    """`✓ name  3.2 s` on a terminal, for a phase that ran silent for at least QUIET_S; `✗ name failed
    after 3.2 s` for one that failed."""
    failed = span.detail.get("failed", False)
    if terminal() and (failed or (not span.shown and span.seconds >= QUIET_S)):
        from rich.console import Console

        text = (f"[red]✗[/red] {span.name} failed after {span.seconds:.1f} s" if failed
                else f"[green]✓[/green] {span.name} [dim]{span.seconds:.1f} s[/dim]")
        Console(stderr=True).print(text, highlight=False)


def _end_lead_in() -> None:
    while _LEAD:
        span = _LEAD.pop()
        span.end = time.time()
        if _STATUS.get("span") is span:
            _status_stop()
        _done_line(span)


def _announce(name: str) -> None:
    """Tell the sinks that want phases (the status file of `evr1 run`'s supervisor) where the run is."""
    with _LOCK:
        current = [s for s in _SINKS if getattr(s, "phases", False)]
    for sink in current:
        with contextlib.suppress(Exception):
            sink(name, 0.0, "")


@contextlib.contextmanager
def phase(name: str, **detail) -> Iterator[Span]:
    """A stretch of work without a bar of its own: a status line on a terminal while it runs (a bar
    opened inside replaces it), `✓ name  N s` after it when it ran silent for QUIET_S or more, and a
    `Span` in `TIMELINE` (what `evr1 run --timings` reports)."""
    _end_lead_in()
    span = Span(name, time.time(), depth=len(_OPEN), detail=dict(detail))
    TIMELINE.append(span)
    _OPEN.append(span)
    _announce(name)
    _status_show(span)
    try:
        yield span
    except BaseException:
        span.detail["failed"] = True
        raise
    finally:
        span.end = time.time()
        _OPEN.remove(span)
        _end_lead_in()
        if _STATUS.get("span") is span:
            _status_stop()
            if _OPEN and not _OPEN[-1].shown:
                _status_show(_OPEN[-1])  # back to the enclosing phase's line
        _done_line(span)


def lead_in(name: str, **detail) -> Span:
    """An open-ended phase: it runs until the next phase or bar starts (or `end_lead_in`), for
    stretches whose end another part of the program decides (the flow run starting, the first metrics)."""
    _end_lead_in()
    span = Span(name, time.time(), depth=len(_OPEN), detail=dict(detail))
    TIMELINE.append(span)
    _LEAD.append(span)
    _announce(name)
    _status_show(span)
    return span


def end_lead_in() -> None:
    _end_lead_in()


def add_span(name: str, start: float, end: float, *, depth: int = 0, **detail) -> Span:
    """A phase measured elsewhere (e.g. by the parent process), put in its place in `TIMELINE`."""
    span = Span(name, start, end, depth=depth, detail=dict(detail))
    with _LOCK:  # also from another thread (a background warm-up)
        TIMELINE.append(span)
        TIMELINE.sort(key=lambda s: s.start)
    return span


def mark(name: str, **detail) -> Span:
    """An instant in `TIMELINE` (e.g. the first training step done), with what it carries."""
    now = time.time()
    span = Span(name, now, now, depth=len(_OPEN), detail=dict(detail))
    TIMELINE.append(span)
    return span


def _bar_opens() -> None:
    """A bar is drawn: the phases running are not silent, and their status line gives way to it."""
    _end_lead_in()
    for span in _OPEN:
        span.shown = True
    _status_stop()


def track(name: str, total: float, unit: str = "items", *, bar: bool | None = None) -> _Fanout:
    """A progress display for `total` units of `name`: a terminal bar when stderr is a TTY (or `bar`),
    and every installed sink."""
    total = max(float(total), 1.0)
    _bar_opens()
    bars: list[Bar] = [_Rich(name, total, unit)] if (terminal() if bar is None else bar) else []
    with _LOCK:
        current = list(_SINKS)
    for sink in current:
        with contextlib.suppress(Exception):
            bars.append(sink(name, total, unit))
    return _Fanout(bars, total)


@contextlib.contextmanager
def tracked(name: str, total: float, unit: str = "items", *, bar: bool | None = None) -> Iterator[_Fanout]:
    """`track` as a block: the display is closed at the end, at 100 % when the block succeeded."""
    t = track(name, total, unit, bar=bar)
    ok = False
    try:
        yield t
        ok = True
    finally:
        t.close(t.total if ok else None)


class Throttle:
    """Calls `fn` at most every `seconds` (and always on `force`): remote sinks stay cheap."""

    def __init__(self, fn: Callable[..., None], seconds: float = 1.0):
        self.fn, self.seconds, self.last = fn, seconds, 0.0

    def __call__(self, *args, force: bool = False, **kw) -> None:
        now = time.monotonic()
        if force or now - self.last >= self.seconds:
            self.last = now
            self.fn(*args, **kw)


class TrainingProgress:
    """Bars for a training: warm-up steps, then GRPO steps with reward and step time beside them.

    Fed by the trainer's `log_metrics(metrics, step)` callback (warm-up metrics carry `warmup/` keys);
    a resumed training starts its bar where the checkpoint left off.
    """

    def __init__(self, warmup_steps: int, steps: int):
        self.warmup_steps, self.steps = warmup_steps, steps
        self._warm: _Fanout | None = None
        self._train: _Fanout | None = None
        self._last: float | None = None  # when the previous metrics came (the timeline's spans end there)
        self._warm_start: float | None = None
        self._first_step_done = False

    def _timeline(self, metrics: dict, step: int) -> None:
        """Spans of the start of a training in `TIMELINE`, from the metrics' arrival: the warm-up, the
        validation before RL, the first GRPO step with its parts (`time/*` of that step)."""
        now, last = time.time(), self._last
        self._last = now
        if self._first_step_done:
            return
        if any(k.startswith("warmup/") for k in metrics):
            if self._warm_start is None:
                self._warm_start = now
            return
        if self._warm_start is not None and last is not None:
            if self.warmup_steps > 1:
                add_span(f"warm-up, steps 2 to {self.warmup_steps}", self._warm_start, last, depth=len(_OPEN))
            self._warm_start = None
        if step == 0:
            if last is not None:
                add_span("validation before RL (and the weight sync before it)", last, now, depth=len(_OPEN))
            return
        parts = {k.removeprefix("time/").removesuffix("_s"): float(v) for k, v in metrics.items()
                 if k.startswith("time/") and k.endswith("_s") and k != "time/step_s"}
        if last is not None:
            add_span(f"first GRPO step (step {step})", last, now, depth=len(_OPEN), parts=parts,
                     step_s=float(metrics.get("time/step_s", now - last)))
        else:
            mark(f"first GRPO step (step {step})", parts=parts, step_s=float(metrics.get("time/step_s", 0.0)))
        self._first_step_done = True

    def __call__(self, metrics: dict, step: int) -> None:
        self._timeline(metrics, step)
        if any(k.startswith("warmup/") for k in metrics):
            if self._warm is None:
                self._warm = track("warm-up", self.warmup_steps, "steps")
            self._warm.update(step, loss=float(metrics.get("warmup/nll", 0.0)))
            return
        if self._warm is not None:
            self._warm.close(self._warm.total)
            self._warm = None
        if self._train is None:
            self._train = track("train", self.steps, "steps")
        fields = {"reward": metrics.get("reward/overall"), "s/step": metrics.get("time/step_s")}
        self._train.update(step, **{k: float(v) for k, v in fields.items() if v is not None})

    def close(self, ok: bool = True) -> None:
        for bar in (self._warm, self._train):
            if bar is not None:
                bar.close(bar.total if ok else None)
        self._warm = self._train = None


class EvalProgress:
    """One bar over every item of an evaluation suite: items done, items/s and the score so far."""

    def __init__(self, total: int):
        self.bar = track("eval", total, "items")
        self.t0, self.done, self.score = time.perf_counter(), 0, 0.0

    def __call__(self, benchmark: str, row: dict) -> None:
        self.done += 1
        self.score += float(row.get("score", 0.0) or 0.0)
        rate = self.done / max(time.perf_counter() - self.t0, 1e-9)
        self.bar.update(self.done, **{"items/s": rate, "score": self.score / self.done})

    def close(self, ok: bool = True) -> None:
        self.bar.close(self.bar.total if ok else None)


class StatusFile:
    """A sink that keeps `{"stage", "done", "total", "unit"}` of the newest display in a JSON file
    (replaced atomically, at most every `seconds`): how a supervising process (`evr1 run`'s, on
    Ctrl-C) knows which stage, and which step of it, the run was in."""

    phases = True  # phases (`phase`, `lead_in`) are reported too: "interrupted during starting Ray"

    def __init__(self, path: str, seconds: float = 0.5):
        self.path, self.seconds = path, seconds

    def __call__(self, name: str, total: float, unit: str) -> Bar:
        return _StatusBar(self, name, total, unit)

    def write(self, stage: str, done: float, total: float, unit: str) -> None:
        import json
        import os

        tmp = f"{self.path}.{os.getpid()}.tmp"
        with open(tmp, "w") as f:
            json.dump({"stage": stage, "done": done, "total": total, "unit": unit}, f)
        os.replace(tmp, self.path)


class _StatusBar:
    def __init__(self, status: StatusFile, name: str, total: float, unit: str):
        self.status, self.name, self.total, self.unit = status, name, total, unit
        self._push = Throttle(lambda done: status.write(name, done, total, unit), status.seconds)
        self._push(0.0, force=True)

    def update(self, done: float, **fields: float | str) -> None:
        self._push(done)

    def close(self, done: float | None = None) -> None:
        if done is not None:
            self._push(done, force=True)
