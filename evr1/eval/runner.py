"""The asynchronous evaluation runner: bounded queues load → generate → score.

Loading (cache reads, decoding, tokenising) runs in threads with a concurrency limit and a timeout
per item, so it overlaps generation; the engine takes whatever is ready, up to a batch. A failing
or hanging load is recorded with its error and counted as wrong, never hangs the run. A generation
past its timeout fails its batch's items too, but the next batch waits until that call has returned:
engines are not thread-safe, so two generations must never overlap — except on an engine that says
it is `concurrent` (vLLM's AsyncLLM, which batches requests continuously), which gets up to
`concurrency` calls in flight. `engine_wait_fraction` is the share of the run during which no call
was in flight: the engine waiting for input.

A whole suite runs through one engine (`run_suite`): the items of every benchmark share one todo
list and one bounded ready queue, each carrying its benchmark's `SuiteJob` (how to load, score and
store it), so the engine starts the next benchmark's items while the last one's are still scoring
and is loaded once, not once per benchmark. `run_items` is the suite of one.
"""

from __future__ import annotations

import asyncio
import time
import traceback
from collections import defaultdict
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from evr1.engines import SamplingParams
from evr1.eval.store import ResultStore

_DONE = object()
_RETRY_ALONE = object()


@dataclass
class EvalSummary:
    benchmark: str
    items: int
    scored: int
    failed: int
    score: float                      # the headline metric over ALL items; failures count as 0
    by_group: dict[str, dict[str, float]] = field(default_factory=dict)
    seconds: float = 0.0
    engine_wait_fraction: float = 0.0
    metric: str = "accuracy"          # what `score` is (the benchmark's official metric)
    parts: dict[str, float] = field(default_factory=dict)  # the metric's breakdowns
    profile: str = "official"

    def metrics(self) -> dict[str, float]:
        """Flat MLflow metrics: `<bench>/<metric>`, coverage, failures, every breakdown and group."""
        b = self.benchmark
        out = {f"{b}/score": self.score, f"{b}/{self.metric}": self.score,
               f"{b}/coverage": self.scored / max(self.items, 1), f"{b}/failed": float(self.failed)}
        for group, row in self.by_group.items():
            out[f"{b}/{group}/score"] = row["score"]
        for name, value in self.parts.items():
            out[f"{b}/{name}"] = value
        return {_mlflow_key(k): v for k, v in out.items()}


def _mlflow_key(key: str) -> str:
    """MLflow allows alphanumerics, _ - . space : / only."""
    return "".join(c if c.isalnum() or c in "_-. :/" else "_" for c in key)


@dataclass
class SuiteJob:
    """One benchmark of a suite: its items, and how to load, score, store and summarise them."""

    benchmark: str
    items: Sequence[Mapping]
    load: Callable[[Mapping], Any]
    score: Callable[[str, Mapping], dict]
    store: ResultStore
    group_key: Callable[[Mapping], str] = lambda i: "all"
    aggregate: Callable | None = None
    profile: str = "official"


async def run_items(items: Sequence[Mapping], *, load: Callable[[Mapping], Any], engine, score: Callable[[str, Mapping], dict],
                    store: ResultStore, sampling: SamplingParams, concurrency: int = 4, queue_size: int = 16,
                    batch_size: int = 8, timeout_s: float = 300.0, group_key: Callable[[Mapping], str] = lambda i: "all",
                    benchmark: str = "eval", aggregate: Callable | None = None, profile: str = "official") -> EvalSummary:
    """Evaluate `items` not already scored in `store` (failed ones run again); return the summary over every item."""
    job = SuiteJob(benchmark=benchmark, items=items, load=load, score=score, store=store, group_key=group_key,
                   aggregate=aggregate, profile=profile)
    summaries = await run_suite([job], engine=engine, sampling=sampling, concurrency=concurrency,
                                queue_size=queue_size, batch_size=batch_size, timeout_s=timeout_s)
    return summaries[benchmark]


async def run_suite(jobs: Sequence[SuiteJob], *, engine, sampling: SamplingParams, concurrency: int = 4,
                    queue_size: int = 16, batch_size: int = 8, timeout_s: float = 300.0,
                    on_result: Callable[[str, dict], None] | None = None) -> dict[str, EvalSummary]:
    """Evaluate every job's unscored items through one `engine`, fed from one bounded queue; a summary per job.

    `on_result(benchmark, row)` is called after each item's result is stored (progress displays).

    A batch may hold items of several benchmarks (they share `sampling`). Each summary's `seconds` runs
    from the start of the suite to its benchmark's last result; `engine_wait_fraction` is the suite's.
    """
    names = [j.benchmark for j in jobs]
    if len(set(names)) != len(names):
        raise ValueError(f"run_suite: benchmark names must be unique, got {names}")
    t0 = time.perf_counter()
    loop = asyncio.get_running_loop()
    todo: asyncio.Queue = asyncio.Queue()
    for job in jobs:
        for item in job.items:
            if not job.store.done(item["id"]):
                todo.put_nowait((job, item))
    ready: asyncio.Queue = asyncio.Queue(maxsize=queue_size)
    scored: asyncio.Queue = asyncio.Queue(maxsize=queue_size)
    last_result = {job.benchmark: 0.0 for job in jobs}

    def record(job: SuiteJob, row: dict) -> None:
        job.store.append(row)
        if on_result is not None:
            on_result(job.benchmark, row)
        last_result[job.benchmark] = time.perf_counter() - t0

    def fail(job: SuiteJob, item: Mapping, stage: str, err: BaseException | str) -> None:
        text = err if isinstance(err, str) else f"{type(err).__name__}: {err}"
        record(job, {"id": item["id"], "group": job.group_key(item), "score": 0.0, "error": text, "stage": stage})

    async def loader() -> None:
        while True:
            try:
                job, item = todo.get_nowait()
            except asyncio.QueueEmpty:
                return
            try:
                inputs = await asyncio.wait_for(in_thread(loop, job.load, item), timeout_s)
            except asyncio.TimeoutError:
                fail(job, item, "load", f"timed out after {timeout_s:g} s")
                continue
            except Exception as e:  # noqa: BLE001 - every failure is recorded with its item
                fail(job, item, "load", e)
                continue
            await ready.put((job, item, inputs))

    clock = {"in_flight": 0, "idle_since": time.perf_counter(), "wait": 0.0}

    def call_started() -> None:
        if clock["in_flight"] == 0:  # the engine was idle until now: that was waiting for input
            clock["wait"] += time.perf_counter() - clock["idle_since"]
        clock["in_flight"] += 1

    def call_ended() -> None:
        clock["in_flight"] -= 1
        if clock["in_flight"] == 0:
            clock["idle_since"] = time.perf_counter()

    async def run_batch(batch: list) -> None:
        call_started()
        try:
            outs = await generate_once([inp for _, _, inp in batch], [(job, item) for job, item, _ in batch],
                                       record_errors=len(batch) == 1)
            if outs is _RETRY_ALONE:
                # One bad item (an over-long prompt, a corrupt tensor) failed the whole call: ask again
                # one item at a time, so only the item that fails alone is recorded as failed.
                outs = [await generate_once([inp], [(job, item)]) for job, item, inp in batch]
                outs = [o[0] if o is not None else None for o in outs]
        finally:
            call_ended()
        if outs is not None:
            for k, (job, item, _) in enumerate(batch):
                if outs[k] is not None:
                    await scored.put((job, item, outs[k][0].text))

    async def generator() -> None:
        """Batches whatever is ready. A `concurrent` engine (vLLM AsyncLLM) gets up to `concurrency`
        calls in flight; any other engine one call at a time (engines are not thread-safe)."""
        slots = asyncio.Semaphore(max(1, concurrency) if getattr(engine, "concurrent", False) else 1)
        running: set[asyncio.Task] = set()
        while True:
            await slots.acquire()
            first = await ready.get()
            if first is _DONE:
                slots.release()
                break
            batch = [first]
            while len(batch) < batch_size and not ready.empty():
                nxt = ready.get_nowait()
                if nxt is _DONE:
                    ready.put_nowait(_DONE)
                    break
                batch.append(nxt)
            task = asyncio.create_task(run_batch(batch))
            running.add(task)
            task.add_done_callback(lambda t: (running.discard(t), slots.release()))
        if running:
            await asyncio.gather(*running)
        if clock["in_flight"] == 0:
            clock["wait"] += time.perf_counter() - clock["idle_since"]
            clock["idle_since"] = time.perf_counter()
        await scored.put(_DONE)

    async def generate_once(prompts: list, batch_items: list[tuple[SuiteJob, Mapping]], *, record_errors: bool = True):
        """One engine call; its items are recorded as failed on error or timeout (then None).

        With `record_errors=False` an engine error returns `_RETRY_ALONE` instead (a timeout is never
        retried: it would cost the timeout once per item).

        Engines are not thread-safe and `agenerate` usually runs in a worker thread that a timeout
        cannot stop, so after a timeout this still waits for the call to return: the next batch
        never starts while the previous generation is running. Its late output is discarded.
        """
        call = asyncio.ensure_future(engine.agenerate(prompts, sampling))
        finished, _ = await asyncio.wait({call}, timeout=timeout_s)
        if not finished:
            for job, item in batch_items:
                fail(job, item, "generate", f"generation timed out after {timeout_s:g} s")
            await asyncio.wait({call})
            if not call.cancelled():
                call.exception()  # mark its late error retrieved: it is not a second failure to log
            return None
        if call.cancelled():
            raise asyncio.CancelledError
        if call.exception() is not None:
            if not record_errors:
                return _RETRY_ALONE
            for job, item in batch_items:
                fail(job, item, "generate", call.exception())
            return None
        return call.result()

    async def scorer() -> None:
        while True:
            got = await scored.get()
            if got is _DONE:
                return
            job, item, text = got
            try:
                result = job.score(text, item)
                record(job, {"id": item["id"], "group": job.group_key(item), "output": text, **result})
            except Exception as e:  # noqa: BLE001
                fail(job, item, "score", f"{e}\n{traceback.format_exc(limit=2)}")

    # `concurrency` loader tasks each run one load at a time, each in a daemon thread of its own: a
    # decoder that hangs past its timeout keeps only its own thread, never a slot that later items
    # need, and cannot keep the run (or the interpreter's exit) waiting.
    loaders = [asyncio.create_task(loader()) for _ in range(max(1, concurrency))]
    t_gen = time.perf_counter()
    gen = asyncio.create_task(generator())
    sc = asyncio.create_task(scorer())
    await asyncio.gather(*loaders)
    await ready.put(_DONE)
    await gen
    await sc
    engine_wall = time.perf_counter() - t_gen
    wall = time.perf_counter() - t0
    return {job.benchmark: summarise(job.items, job.store, benchmark=job.benchmark, group_key=job.group_key,
                                     seconds=last_result[job.benchmark] or wall, engine_wait=clock["wait"],
                                     engine_busy=max(0.0, engine_wall - clock["wait"]), aggregate=job.aggregate,
                                     profile=job.profile)
            for job in jobs}




def in_thread(loop: asyncio.AbstractEventLoop, fn: Callable[[Mapping], Any], item: Mapping) -> asyncio.Future:
    """`fn(item)` in a new daemon thread, as a future of this loop (abandoned, not joined, on timeout)."""
    fut = loop.create_future()

    def settle(result: Any, error: BaseException | None) -> None:
        if fut.done():  # timed out and cancelled: the late result is dropped
            return
        if error is not None:
            fut.set_exception(error)
        else:
            fut.set_result(result)

    def target() -> None:
        try:
            outcome: tuple[Any, BaseException | None] = (fn(item), None)
        except BaseException as e:  # noqa: BLE001 - handed to the awaiting loader, which records it
            outcome = (None, e)
        try:
            loop.call_soon_threadsafe(settle, *outcome)
        except RuntimeError:  # the run ended (loop closed) while this load hung: nobody waits for it
            pass

    threading.Thread(target=target, name="evr1-load", daemon=True).start()
    return fut


def summarise(items: Sequence[Mapping], store: ResultStore, *, benchmark: str, group_key, seconds: float = 0.0,
              engine_wait: float = 0.0, engine_busy: float = 0.0, aggregate: Callable | None = None,
              profile: str = "official") -> EvalSummary:
    """Scores over every item from its newest record (missing or failed count as 0; coverage says how many
    were scored). With `aggregate` (a benchmark's `Aggregate`), the headline is its official metric."""
    totals: dict[str, list[float]] = defaultdict(list)
    scored = failed = 0
    for item in items:
        rec = store.results.get(str(item["id"]))
        value = float(rec.get("score", 0.0)) if rec else 0.0
        if rec and "error" in rec:
            failed += 1
        elif rec:
            scored += 1
        totals[group_key(item)].append(value)
        totals["__all__"].append(value)
    everything = totals.pop("__all__", [])
    by_group = {g: {"score": sum(v) / len(v), "n": float(len(v))} for g, v in sorted(totals.items())}
    busy_and_wait = engine_wait + engine_busy
    headline, metric, parts = (sum(everything) / len(everything) if everything else 0.0), "accuracy", {}
    if aggregate is not None:
        report = aggregate([(item, store.results.get(str(item["id"])) or {}) for item in items])
        headline, metric, parts = report.value, report.metric, dict(report.parts)
    return EvalSummary(benchmark=benchmark, items=len(items), scored=scored, failed=failed, score=headline,
                       by_group=by_group, seconds=seconds, metric=metric, parts=parts, profile=profile,
                       engine_wait_fraction=engine_wait / busy_and_wait if busy_and_wait else 0.0)
