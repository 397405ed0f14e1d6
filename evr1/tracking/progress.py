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
        self._task = self._p.add_task(name, total=total, info="")

    def update(self, done: float, **fields: float | str) -> None:
        self._p.update(self._task, completed=done, info=describe(fields))

    def close(self, done: float | None = None) -> None:
        if done is not None:
            self._p.update(self._task, completed=done)
        self._p.stop()


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


def track(name: str, total: float, unit: str = "items", *, bar: bool | None = None) -> _Fanout:
    """A progress display for `total` units of `name`: a terminal bar when stderr is a TTY (or `bar`),
    and every installed sink."""
    total = max(float(total), 1.0)
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

    def __call__(self, metrics: dict, step: int) -> None:
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
