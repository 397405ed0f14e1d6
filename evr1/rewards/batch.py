"""Batch scoring: inline for one worker, a process pool for more, a time limit per item either way.

Timed-out items score 0 and are counted in the metrics, as are errors and unknown problem types.
In the pool, each item runs under an alarm in its worker (Python-level runaways stop there), and
the parent knows which item each worker is on and since when (a worker answers its chunk's items
in order); an item stuck past its limit in C code (where no alarm reaches) gets its worker
killed and replaced, is scored 0 as timed out, and the rest of that chunk runs again; a dying
worker likewise (see `_run_pool`). Workers are fresh interpreters (`python -m
evr1.rewards._worker pool`), never forks (the caller may hold CUDA or Ray state) and never
multiprocessing children (which re-import the caller's main module); they load the plugin files
and modules that registered families outside evr1. Families defined in the caller's main module
score in the caller.
"""

from __future__ import annotations

import atexit
import importlib
import os
import pickle
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from typing import Any

from evr1.rewards.registry import (
    Family,
    check_shaping,
    families,
    family_for,
    load_reward_function,
    needs_prepare,
    plugin_files,
    prepare_family,
)
from evr1.rewards.score import ItemInfo, score_item
from evr1.rewards.timeouts import (
    DEFAULT_TIMEOUT,
    ItemTimeout,
    RewardHelperError,
    check_timeout,
    guarded,
    time_limit,
)
from evr1.rewards.weights import RewardWeights, check_weights

_GRACE = 2.0  # seconds past the limit before a worker is declared stuck in C code
_POLL = 0.2
# How long a worker may take over a family's one-time set-up (an import) before it is declared stuck:
# as long as a worker gets to start, since that is mostly imports too.
_PREPARE_S = 120.0

Item = tuple[int, Any, Any]  # (index, response, sample)
Outcome = tuple[int, dict[str, float], ItemInfo]
Shaping = tuple[tuple[str, str], ...]  # `registry.check_shaping`'s form


@dataclass
class BatchResult:
    """Per-item score dicts (in input order) and batch metrics (flat, ready for a metrics logger).

    metrics: `items`, `seconds`, `items_per_second`, `timeouts`, `errors`, `unknown`, plus
    `unknown_type/<type>` and `family/<name>` counts.
    """

    scores: list[dict[str, float]]
    metrics: dict[str, float]
    timed_out: list[int] = field(default_factory=list)
    errors: dict[int, str] = field(default_factory=dict)


def _zero(weights: RewardWeights) -> dict[str, float]:
    return {"overall": weights.overall(0.0, 0.0), "accuracy": 0.0, "format": 0.0}


def _failed(index: int, sample: Any, weights: RewardWeights, *, timed_out: bool, error: str | None) -> Outcome:
    raw_type = sample.get("problem_type") if isinstance(sample, Mapping) else None
    family, known = family_for(raw_type)
    label = raw_type.strip().lower() if isinstance(raw_type, str) else repr(raw_type)
    return index, _zero(weights), ItemInfo(family.name, known, label, timed_out, error)


def _family_of(sample: Any) -> Family:
    """The family that scores `sample` (generic for an unknown or missing `problem_type`)."""
    return family_for(sample.get("problem_type") if isinstance(sample, Mapping) else None)[0]


def _score_guarded(item: Item, weights: RewardWeights, timeout: float | None, shaping: Shaping = ()) -> Outcome:
    index, response, sample = item
    prepare_family(_family_of(sample))  # before the limit starts: a slow import is not this item's time
    try:
        with time_limit(timeout):
            scores, info = score_item(response, sample, weights, timeout, shaping)
    except ItemTimeout:
        return _failed(index, sample, weights, timed_out=True, error=None)
    return index, scores, info


# ---- pool workers -------------------------------------------------------------------------
#
# Each worker is `python -m evr1.rewards._worker pool`: a clean interpreter that imports evr1 and
# the modules and plugin files that registered families, never the caller's main module, so the
# pool works from a script without a main guard, from `python -` and from a notebook. The parent
# sends chunks of pickled items; the worker answers one outcome per item, in order, so the parent
# always knows which item each worker is on and since when.


def serve_pool(requests: Connection, replies: Connection) -> None:
    """Worker loop: ("init", plugins, modules) once, then ("chunk", blobs, weights, timeout, shaping)."""
    _, plugins, modules = requests.recv()
    import evr1.rewards  # noqa: F401  (registers the built-in families)

    for module in modules:
        importlib.import_module(module)
    for path in plugins:
        _load_plugin(path)
    replies.send(("ready",))
    while True:
        try:
            _, blobs, weights, timeout, shaping = requests.recv()
        except EOFError:
            return
        with guarded():
            for blob in blobs:
                try:
                    item = pickle.loads(blob)
                except Exception as exc:  # e.g. a sample class this interpreter cannot import
                    replies.send(("item", None, f"item could not be loaded in the worker: {exc!r}"))
                    continue
                family = _family_of(item[2])
                if needs_prepare(family):  # the parent waits _PREPARE_S for it, not the item's limit
                    replies.send(("preparing", family.name))
                    prepare_family(family)
                try:
                    replies.send(("item", _score_guarded(item, weights, timeout, shaping), None))
                except RewardHelperError as exc:  # scoring cannot work here: the caller raises
                    replies.send(("fatal", exc))
                    return


def _load_plugin(path: str) -> None:
    try:
        load_reward_function(path)
    except AttributeError:
        pass  # the file has no `main`: loading it has registered its families, which is what we need


class _Worker:
    """One worker process, the chunk it is working through, and when its current item started."""

    def __init__(self, plugins: list[str], modules: list[str]) -> None:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
        try:
            self.proc = subprocess.Popen([sys.executable, "-m", "evr1.rewards._worker", "pool"],
                                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, close_fds=True)
        except OSError as exc:
            raise RewardHelperError(f"reward worker could not start ({sys.executable} -m evr1.rewards._worker): "
                                    f"{exc}") from exc
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.send = Connection(os.dup(self.proc.stdin.fileno()), readable=False)
        self.conn = Connection(os.dup(self.proc.stdout.fileno()), writable=False)
        self.proc.stdin.close()
        self.proc.stdout.close()
        self.send.send(("init", plugins, modules))
        self.ready = False
        self.queue: list[Item] = []
        self.since = 0.0

    def wait_ready(self) -> None:
        try:
            self.ready = bool(self.conn.poll(120)) and self.conn.recv()[0] == "ready"
        except (EOFError, OSError):
            self.ready = False
        if not self.ready:
            status = self.kill()
            raise RewardHelperError(f"reward worker ({sys.executable} -m evr1.rewards._worker pool) did not start "
                                    f"within 120 s (exit status {status}); see its stderr above")

    def submit(self, chunk: list[tuple[Item, bytes]], weights: RewardWeights, timeout: float | None,
               shaping: Shaping = ()) -> None:
        self.queue = [item for item, _ in chunk]
        self.since = time.monotonic()
        self.send.send(("chunk", [blob for _, blob in chunk], weights, timeout, shaping))

    def kill(self) -> int | None:
        if self.proc.poll() is None:
            self.proc.kill()
        status = self.proc.wait()
        for conn in (self.send, self.conn):
            conn.close()
        return status

    def stop(self) -> None:
        self.send.close()  # the worker exits when its requests close
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.conn.close()


class _Pool:
    def __init__(self, workers: int, plugins: list[str], modules: list[str]) -> None:
        self.plugins, self.modules = plugins, modules
        self.workers: list[_Worker] = []
        try:
            self.workers = [_Worker(plugins, modules) for _ in range(workers)]
            for worker in self.workers:
                worker.wait_ready()
        except BaseException:
            self.kill()
            raise

    def replace(self, worker: _Worker) -> _Worker:
        worker.kill()
        fresh = _Worker(self.plugins, self.modules)
        fresh.wait_ready()
        self.workers[self.workers.index(worker)] = fresh
        return fresh

    def kill(self) -> None:
        for worker in self.workers:
            worker.kill()
        self.workers = []

    def stop(self) -> None:
        for worker in self.workers:
            worker.stop()
        self.workers = []


_pools: dict[tuple, _Pool] = {}


def _pool(workers: int) -> _Pool:
    # Families registered by importable modules outside evr1 (plugin files are replayed by path).
    modules = sorted(
        {
            f.module
            for f in families().values()
            if f.module
            and not f.module.startswith(("evr1.rewards.", "evr1_user_reward_"))
            and f.module not in ("__main__", "__mp_main__")
        }
    )
    key = (workers, tuple(plugin_files()), tuple(modules))
    if key not in _pools:
        shutdown_pools()
        _pools[key] = _Pool(workers, list(key[1]), modules)
    return _pools[key]


def shutdown_pools() -> None:
    """Stop the worker processes kept between batches."""
    while _pools:
        _, pool = _pools.popitem()
        pool.stop()


atexit.register(shutdown_pools)


def _inline_families() -> set[str]:
    """Families defined in the caller's main module: a worker cannot import them, so they score here."""
    return {f.name for f in families().values() if f.module in ("__main__", "__mp_main__")}


def _run_pool(
    items: list[Item], workers: int, weights: RewardWeights, timeout: float | None, chunk_size: int,
    shaping: Shaping = (),
) -> dict[int, Outcome]:
    """Score `items` in the pool, surviving stuck items (their worker killed, the item timed out)
    and dying workers (the item a worker died on runs once more in a fresh worker; a second death
    makes it an error, "worker died"; no other item is failed)."""
    results: dict[int, Outcome] = {}
    samples = {index: sample for index, _, sample in items}
    local = _inline_families()
    pending: list[tuple[Item, bytes]] = []
    for item in items:
        sample = item[2]
        raw_type = sample.get("problem_type") if isinstance(sample, Mapping) else None
        if local and family_for(raw_type)[0].name in local:
            results[item[0]] = _score_guarded(item, weights, timeout, shaping)
            continue
        try:
            pending.append((item, pickle.dumps(item)))
        except Exception as exc:  # e.g. a sample that cannot be pickled: fail it alone
            results[item[0]] = _failed(item[0], sample, weights, timed_out=False, error=repr(exc))
    if not pending:
        return results
    pool = _pool(workers)
    size = max(1, min(chunk_size, -(-len(pending) // (workers * 4))))
    suspects: set[int] = set()
    try:
        while pending or any(w.queue for w in pool.workers):
            for worker in pool.workers:
                if worker.queue or not pending:
                    continue
                if pending[0][0][0] in suspects:
                    chunk, pending = pending[:1], pending[1:]
                else:
                    take = 0
                    while take < min(size, len(pending)) and pending[take][0][0] not in suspects:
                        take += 1
                    chunk, pending = pending[:take], pending[take:]
                worker.submit(chunk, weights, timeout, shaping)
            busy = {w.conn: w for w in pool.workers if w.queue}
            for conn in wait(list(busy), timeout=_POLL):
                worker = busy[conn]
                try:
                    message = conn.recv()
                except (EOFError, OSError):  # the worker died on its current item
                    current, rest = worker.queue[0], worker.queue[1:]
                    if current[0] in suspects:
                        results[current[0]] = _failed(current[0], current[2], weights, timed_out=False,
                                                      error="worker died")
                    else:
                        suspects.add(current[0])
                        rest = [current, *rest]
                    pending = [(item, pickle.dumps(item)) for item in rest] + pending
                    worker.queue = []
                    pool.replace(worker)
                    continue
                if message[0] == "fatal":  # e.g. SandboxUnavailable: the same exception here
                    raise message[1]
                if message[0] == "preparing":  # a family's one-time set-up, outside the item's limit
                    worker.since = time.monotonic() + _PREPARE_S
                    continue
                _, outcome, error = message
                current = worker.queue.pop(0)
                if outcome is None:
                    outcome = _failed(current[0], current[2], weights, timed_out=False, error=error)
                results[current[0]] = outcome
                worker.since = time.monotonic()
            if timeout:
                now = time.monotonic()
                for worker in list(pool.workers):
                    if worker.queue and now - worker.since > timeout + _GRACE:  # stuck in C code
                        current, rest = worker.queue[0], worker.queue[1:]
                        results[current[0]] = _failed(current[0], samples[current[0]], weights, timed_out=True,
                                                      error=None)
                        pending = [(item, pickle.dumps(item)) for item in rest] + pending
                        worker.queue = []
                        pool.replace(worker)
    except BaseException:
        pool.kill()
        _pools.clear()
        raise
    return results


# ---- public entry point ---------------------------------------------------------------------


def compute_scores(
    responses: Sequence[str],
    samples: Sequence[Mapping[str, Any]],
    *,
    workers: int = 1,
    timeout: float | None = DEFAULT_TIMEOUT,
    accuracy_weight: float = 0.9,
    format_weight: float = 0.1,
    chunk_size: int = 64,
    shaping: Mapping[str, str] | None = None,
) -> BatchResult:
    """Score `responses[i]` against `samples[i]` for every i.

    `workers <= 1` scores inline (the fast path; math still runs under its time limit in a helper
    process and code in its sandbox); more workers use a pool of `python -m evr1.rewards._worker`
    processes kept between calls, which works from any caller (no main guard needed).
    `timeout` is the per-item limit in seconds (None: no limit; negative, zero, NaN or inf raise
    `ValueError`). A machine that cannot score an item at all (`SandboxUnavailable`,
    `RewardHelperError`) raises; every other failure is a 0 counted in the metrics.
    `shaping` (`{family: name}`) forms `overall` from a registered training reward instead of the
    accuracy of that family's items (`register_shaping`); `accuracy` is unchanged.
    """
    if len(responses) != len(samples):
        raise ValueError(f"compute_scores: {len(responses)} responses but {len(samples)} samples")
    weights = check_weights(accuracy_weight, format_weight)
    timeout = check_timeout(timeout)
    shaped = check_shaping(shaping)
    started = time.perf_counter()
    if workers <= 1 or len(responses) <= 1:
        outcomes = []
        for index, (response, sample) in enumerate(zip(responses, samples, strict=True)):
            scores, info = score_item(response, sample, weights, timeout, shaped)
            outcomes.append((index, scores, info))
    else:
        items = list(zip(range(len(responses)), responses, samples, strict=True))
        by_index = _run_pool(items, workers, weights, timeout, chunk_size, shaped)
        outcomes = [by_index[i] for i in range(len(responses))]
    return _collect(outcomes, time.perf_counter() - started)


def _collect(outcomes: list[Outcome], seconds: float) -> BatchResult:
    unknown: Counter[str] = Counter()
    per_family: Counter[str] = Counter()
    timed_out, errors = [], {}
    for index, _, info in outcomes:
        per_family[info.family] += 1
        if not info.known_type:
            unknown[info.problem_type] += 1
        if info.timed_out:
            timed_out.append(index)
        if info.error:
            errors[index] = info.error
    metrics: dict[str, float] = {
        "items": float(len(outcomes)),
        "seconds": seconds,
        "items_per_second": len(outcomes) / seconds if seconds > 0 else 0.0,
        "timeouts": float(len(timed_out)),
        "errors": float(len(errors)),
        "unknown": float(sum(unknown.values())),
    }
    metrics.update({f"unknown_type/{t}": float(n) for t, n in sorted(unknown.items())})
    metrics.update({f"family/{f}": float(n) for f, n in sorted(per_family.items())})
    return BatchResult([scores for _, scores, _ in outcomes], metrics, timed_out, errors)
