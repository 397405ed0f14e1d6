"""Batch scoring: inline for one worker, a process pool for more, a time limit per item either way.

Timed-out items score 0 and are counted in the metrics, as are errors and unknown problem types.
In the pool, each item runs under an alarm in its worker (Python-level runaways stop there), and
each worker publishes which item it is on and since when; an item stuck past its limit in C code
(where no alarm reaches) gets its pool killed, is scored 0 as timed out, and the unfinished items
run again in a fresh pool; a dying worker likewise (see `_run_pool`). Workers are spawned, never
forked (the caller may hold CUDA or Ray state), and load the plugin files and modules that
registered families outside evr1.
"""

from __future__ import annotations

import atexit
import importlib
import multiprocessing as mp
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from typing import Any

from evr1.rewards.registry import families, family_for, load_reward_function, plugin_files
from evr1.rewards.score import ItemInfo, score_item
from evr1.rewards.timeouts import DEFAULT_TIMEOUT, ItemTimeout, guarded, time_limit
from evr1.rewards.weights import RewardWeights, check_weights

_GRACE = 2.0  # seconds past the limit before a worker is declared stuck in C code
_POLL = 0.2

Item = tuple[int, Any, Any]  # (index, response, sample)
Outcome = tuple[int, dict[str, float], ItemInfo]


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


def _score_guarded(item: Item, weights: RewardWeights, timeout: float | None) -> Outcome:
    index, response, sample = item
    try:
        with time_limit(timeout):
            scores, info = score_item(response, sample, weights, timeout)
    except ItemTimeout:
        return _failed(index, sample, weights, timed_out=True, error=None)
    return index, scores, info


# ---- pool workers -------------------------------------------------------------------------

_slot = -1
_started: Any = None  # shared doubles: monotonic start time of each worker's current item, 0 when idle
_current: Any = None  # shared ints: index of each worker's current item


def _init_worker(started: Any, current: Any, counter: Any, plugins: list[str], modules: list[str]) -> None:
    global _slot, _started, _current
    with counter.get_lock():
        _slot = counter.value
        counter.value += 1
    _started, _current = started, current
    import evr1.rewards  # noqa: F401  (registers the built-in families)

    for module in modules:
        importlib.import_module(module)
    for path in plugins:
        _load_plugin(path)


def _load_plugin(path: str) -> None:
    try:
        load_reward_function(path)
    except AttributeError:
        pass  # the file has no `main`: loading it has registered its families, which is what we need


def _score_chunk(items: list[Item], weights: RewardWeights, timeout: float | None) -> list[Outcome]:
    out = []
    with guarded():
        for item in items:
            _current[_slot] = item[0]
            _started[_slot] = time.monotonic()
            try:
                out.append(_score_guarded(item, weights, timeout))
            finally:
                _started[_slot] = 0.0
    return out


class _Pool:
    """A spawned process pool plus the shared slots through which its workers report progress."""

    def __init__(self, workers: int, plugins: list[str], modules: list[str]) -> None:
        ctx = mp.get_context("spawn")
        self.started = ctx.Array("d", workers, lock=False)
        self.current = ctx.Array("q", workers, lock=False)
        counter = ctx.Value("i", 0)
        self.executor = ProcessPoolExecutor(
            workers,
            mp_context=ctx,
            initializer=_init_worker,
            initargs=(self.started, self.current, counter, plugins, modules),
        )

    def stuck_items(self, timeout: float) -> list[int]:
        now = time.monotonic()
        return [
            self.current[slot]
            for slot in range(len(self.started))
            if self.started[slot] > 0 and now - self.started[slot] > timeout + _GRACE
        ]

    def busy_items(self) -> list[int]:
        return [self.current[s] for s in range(len(self.started)) if self.started[s] > 0]

    def kill(self) -> None:
        for process in list(getattr(self.executor, "_processes", {}).values()):
            process.kill()  # no public API stops a running task; the pool is discarded after this
        self.executor.shutdown(wait=False, cancel_futures=True)


_pools: dict[tuple, _Pool] = {}


def _pool(workers: int) -> _Pool:
    # Families registered by importable modules outside evr1 (plugin files are replayed by path;
    # a script's own families re-register when spawn re-imports it as __mp_main__).
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
        pool.executor.shutdown(wait=True, cancel_futures=True)


atexit.register(shutdown_pools)


def _run_pool(
    items: list[Item], workers: int, weights: RewardWeights, timeout: float | None, chunk_size: int
) -> dict[int, Outcome]:
    """Score `items` in the pool, surviving stuck items (killed, timed out) and dead workers.

    Items in progress when a worker died become suspects and run next, one at a time in a
    single-worker pool, so a second death names the culprit exactly (scored 0 as an error) and
    no innocent item is failed. Every round finishes, fails or suspects at least one item.
    """
    results: dict[int, Outcome] = {}
    samples = {index: sample for index, _, sample in items}
    suspects: set[int] = set()
    pending = items
    while pending:
        progress = len(results) + len(suspects)
        isolated = [item for item in pending if item[0] in suspects]
        batch = isolated or pending
        pool = _pool(1 if isolated else workers)
        size = 1 if isolated else max(1, min(chunk_size, -(-len(batch) // (workers * 4))))
        futures: dict[Future, list[Item]] = {}
        for i in range(0, len(batch), size):
            chunk = batch[i : i + size]
            futures[pool.executor.submit(_score_chunk, chunk, weights, timeout)] = chunk
        stuck: list[int] = []
        crashed: list[int] | None = None
        waiting = set(futures)
        while waiting:
            done, waiting = wait(waiting, timeout=_POLL, return_when=FIRST_COMPLETED)
            for future in done:
                try:
                    results.update((outcome[0], outcome) for outcome in future.result())
                except BrokenProcessPool:
                    crashed = pool.busy_items()
                except Exception as exc:  # e.g. a sample that cannot be pickled: fail its chunk only
                    for index, _, sample in futures[future]:
                        results[index] = _failed(index, sample, weights, timed_out=False, error=repr(exc))
            if crashed is not None or (timeout and (stuck := pool.stuck_items(timeout))):
                break
        if waiting or crashed is not None:
            pool.kill()
            _pools.clear()
        for index in stuck:
            results[index] = _failed(index, samples[index], weights, timed_out=True, error=None)
        for index in crashed or []:
            if isolated:
                results[index] = _failed(index, samples[index], weights, timed_out=False, error="worker died")
            else:
                suspects.add(index)
        pending = [item for item in pending if item[0] not in results]
        if pending and len(results) + len(suspects) == progress:  # nothing learnt: stop retrying
            for index, _, sample in pending:
                results[index] = _failed(index, sample, weights, timed_out=False, error="worker pool failed")
            pending = []
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
) -> BatchResult:
    """Score `responses[i]` against `samples[i]` for every i.

    `workers <= 1` scores inline (the fast path; math still runs under its time limit in a helper
    process and code in its sandbox); more workers use a spawned process pool kept between calls.
    `timeout` is the per-item limit in seconds (None: no limit).
    """
    if len(responses) != len(samples):
        raise ValueError(f"compute_scores: {len(responses)} responses but {len(samples)} samples")
    weights = check_weights(accuracy_weight, format_weight)
    started = time.perf_counter()
    if workers <= 1 or len(responses) <= 1:
        outcomes = []
        for index, (response, sample) in enumerate(zip(responses, samples, strict=True)):
            scores, info = score_item(response, sample, weights, timeout)
            outcomes.append((index, scores, info))
    else:
        items = list(zip(range(len(responses)), responses, samples, strict=True))
        by_index = _run_pool(items, workers, weights, timeout, chunk_size)
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
