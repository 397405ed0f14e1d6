"""Generation that overlaps training (`trainer.mode`: one_step_off, bounded): a producer thread in the
driver collects the next steps' batches on the separate rollout workers while the ranks train.

Batch `s` is trained by the policy after `s - 1` updates. The producer may start generating it once
the trainer has finished at least `s - 1 - max_staleness` updates (`StalenessGate`, AReaL's admission
rule with one batch per version): `max_staleness: 0` is the synchronous trainer exactly (generation
of `s` waits for update `s - 1` and a sync), `1` is verl's one-step-off recipe (batch `s` is generated
by the policy one version behind the one that trains on it), larger values let generation run further
ahead on a fast rollout pool.

Before each batch the producer syncs the workers when the trainer has made updates they do not hold;
a sync and a generation never overlap (both hold `engine_lock`, which `quiesce` also takes for
validation). Every batch carries the policy version its engines held; the trainer logs the staleness
and corrects for it with the importance weights of `rl.correction` (the engines' behaviour log-probs
against the trainer's proximal ones).
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field


@dataclass
class Collected:
    """One step's batch as the producer made it."""

    step: int
    generated: object  # collect.Rollout: everything generated
    batch: object  # collect.Rollout: what the update trains on
    metrics: dict[str, float]
    cursor: dict  # the prompt source's state after this step's draws: what a checkpoint of step `step` resumes from
    version: int  # the policy version (updates) the engines held while generating it
    rollout_stats: dict = field(default_factory=dict)  # the engines' data stats for this step
    collect_s: float = 0.0
    sync: dict[str, float] = field(default_factory=dict)  # the sync made before it, if any


class StalenessGate:
    """Admits batch `step` once `trained` updates are done and `step - 1 - trained <= max_staleness`."""

    def __init__(self, max_staleness: int, trained: int = 0):
        if max_staleness < 0:
            raise ValueError(f"StalenessGate: max_staleness must be ≥ 0, got {max_staleness}")
        self.max_staleness, self.trained = max_staleness, trained
        self._cond = threading.Condition()

    def admits(self, step: int) -> bool:
        return step - 1 - self.trained <= self.max_staleness

    def advance(self, trained: int) -> None:
        with self._cond:
            self.trained = max(self.trained, trained)
            self._cond.notify_all()

    def wait(self, step: int, stop: threading.Event) -> None:
        with self._cond:
            while not self.admits(step) and not stop.is_set():
                self._cond.wait(timeout=0.5)


class RecordingLock:
    """A lock that logs what held it and when: (what, start, end) per hold, for tests and idle figures."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.holds: list[tuple[str, float, float]] = []

    @contextmanager
    def held(self, what: str) -> Iterator[None]:
        with self._lock:
            start = time.perf_counter()
            try:
                yield
            finally:
                self.holds.append((what, start, time.perf_counter()))


class RolloutProducer:
    """Runs `collect(step, version)` for steps `first..last` in a thread, gated by staleness, syncing
    first (`sync() -> report with "version"`) whenever the trainer is ahead of the engines."""

    def __init__(self, collect: Callable[[int, int], Collected], sync: Callable[[], dict], *, first: int, last: int,
                 max_staleness: int, trained: int, engine_version: int, lock: RecordingLock | None = None):
        self._collect, self._sync = collect, sync
        self.gate = StalenessGate(max_staleness, trained)
        self.engine_version = engine_version
        self.lock = lock or RecordingLock()
        self._queue: queue.Queue = queue.Queue()
        self._stop = threading.Event()
        self.idle_s = 0.0  # time the producer waited at the gate (the engines had nothing to do)
        self._thread = threading.Thread(target=self._run, args=(first, last), name="rollout-producer", daemon=True)
        self._thread.start()

    def _run(self, first: int, last: int) -> None:
        try:
            for step in range(first, last + 1):
                t0 = time.perf_counter()
                self.gate.wait(step, self._stop)
                self.idle_s += time.perf_counter() - t0
                if self._stop.is_set():
                    return
                report: dict[str, float] = {}
                if self.gate.trained > self.engine_version:
                    with self.lock.held("sync"):
                        report = self._sync()
                        self.engine_version = int(report["version"])
                with self.lock.held("generate"):
                    t1 = time.perf_counter()
                    item = self._collect(step, self.engine_version)
                    item.collect_s = time.perf_counter() - t1
                item.sync = report
                self._queue.put(item)
        except BaseException as exc:  # noqa: BLE001 - handed to the trainer thread, which raises it
            self._queue.put(exc)

    def take(self) -> Collected:
        """The next batch (blocks); re-raises the producer's failure."""
        item = self._queue.get()
        if isinstance(item, BaseException):
            raise item
        return item

    def trained(self, updates: int) -> None:
        self.gate.advance(updates)

    @contextmanager
    def quiesce(self, what: str = "validate") -> Iterator[None]:
        """Hold the engines between two generations (e.g. to sync the newest weights and validate)."""
        with self.lock.held(what):
            yield

    def close(self) -> None:
        self._stop.set()
        self.gate.advance(self.gate.trained)  # wake a waiting producer so it sees the stop
        self._thread.join(timeout=600)
