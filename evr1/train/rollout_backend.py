"""Where the step's responses are generated, behind one interface the collection loop talks to.

`collect.py` asks a `RolloutBackend` to read prompts (`prepare`), generate from them (`generate`),
forget them (`release`) and take in new weights (`sync`); it does not know where the engines are:

- `SeparateRollout`: one rollout worker, a Ray actor beside the policy ranks with a device of its own
  (CPU runs, debugging). A sync streams the weights from policy rank 0 to it in fixed-size buckets
  over a bounded queue: one or two buckets in flight, never a whole state dict in any process.
- `ColocatedRollout`: an engine inside every policy rank, on the rank's own device. Each rank
  generates a contiguous share of the step's prompts (the share it is most likely to train on, so its
  frames are read once), all samples of a prompt on one engine; the engine sleeps while the rank
  trains, and a sync streams the rank's gathered weights into it in-process: nothing crosses Ray.

Handles name a prepared prompt on the engine that read it: an int for the separate worker, a
(rank, local handle) pair for colocated engines. Every call goes through the group's `MessageLog`.
"""

from __future__ import annotations

import time
from typing import Protocol

import ray

from evr1.train.messages import MessageLog

# What a sync reports, summed or maxed over engines, in `perf/sync_*` metrics.
SYNC_MAX = ("seconds", "gather_s", "load_s", "reset_s", "wake_s", "sleep_s")


class RolloutBackend(Protocol):
    """The collection loop's view of the rollout engines (see the module docstring)."""

    placement: str

    def prefetch(self, rows: list[dict]) -> None: ...

    def prepare(self, rows: list[dict]) -> list[dict]: ...

    def generate(self, handles: list, params: dict) -> list[list[dict]]: ...

    def release(self, handles: list) -> None: ...

    def data_stats(self) -> dict[str, float]: ...

    def first_readable(self, rows: list[dict]) -> dict | None: ...

    def training(self) -> dict[str, float]: ...

    def sync(self, version: int) -> dict[str, float]: ...

    def close(self) -> None: ...


class SeparateRollout:
    """One rollout worker actor; `ranks` are the policy ranks that send it their weights."""

    placement = "separate"

    def __init__(self, actor, ranks: list, messages: MessageLog, *, weight_dtype: str, bucket_bytes: int,
                 gather=ray.get):
        self.actor, self.ranks, self.messages = actor, ranks, messages
        self.weight_dtype, self.bucket_bytes, self._gather = weight_dtype, bucket_bytes, gather
        self._queue = None

    def prefetch(self, rows: list[dict]) -> None:
        self.messages.call(self.actor.prefetch, rows)

    def prepare(self, rows: list[dict]) -> list[dict]:
        return ray.get(self.messages.call(self.actor.prepare, rows))

    def generate(self, handles: list, params: dict) -> list[list[dict]]:
        return ray.get(self.messages.call(self.actor.generate_prepared, handles, params))

    def release(self, handles: list) -> None:
        self.messages.call(self.actor.release, handles)  # ordered after generate: an actor runs calls in turn

    def data_stats(self) -> dict[str, float]:
        stats = ray.get(self.actor.data_stats.remote())
        stats["generate_s_per_engine"] = [stats["generate_s"]]
        return stats

    def first_readable(self, rows: list[dict]) -> dict | None:
        return ray.get(self.messages.call(self.actor.first_readable, rows))

    def training(self) -> dict[str, float]:
        """The separate worker keeps its device: nothing to put to sleep."""
        return {}

    def sync(self, version: int) -> dict[str, float]:
        """Every rank gathers (a collective, one FSDP unit at a time); rank 0 packs the tensors into
        buckets and puts them on a queue of two that the worker drains into its engine."""
        from ray.util.queue import Queue

        if self._queue is None:  # one queue actor for the run: starting one costs about a second
            self._queue = Queue(maxsize=2, actor_options={"num_cpus": 0})
        queue = self._queue
        t0 = time.perf_counter()
        receive = self.messages.call(self.actor.receive_weights, queue, version)
        sends = [self.messages.call(r.send_weights, queue if i == 0 else None, self.weight_dtype,
                                    self.bucket_bytes) for i, r in enumerate(self.ranks)]
        out = self._gather([receive, *sends])
        report = {**out[0], **{k: v for k, v in out[1].items() if k not in out[0]}}
        report["seconds"] = time.perf_counter() - t0
        return report

    def close(self) -> None:
        if self._queue is not None:
            self._queue.shutdown(force=True)
            self._queue = None


class ColocatedRollout:
    """An engine in every policy rank (`PolicyWorker.build_engine`); `ranks` are the rank actors."""

    placement = "colocated"

    def __init__(self, ranks: list, messages: MessageLog, *, gather=ray.get):
        self.ranks, self.messages, self._gather = ranks, messages, gather

    def _share(self, n: int) -> list[tuple[int, int]]:
        """Contiguous (start, stop) of `n` prompts per rank, the first ranks one more when uneven."""
        k = len(self.ranks)
        bounds, start = [], 0
        for r in range(k):
            stop = start + n // k + (r < n % k)
            bounds.append((start, stop))
            start = stop
        return bounds

    def _on_each(self, method: str, parts: list[tuple]) -> list:
        """`rollout(method, *args)` on the ranks whose part is not None, concurrently."""
        refs = {r: self.messages.call(self.ranks[r].rollout, method, *args)
                for r, args in enumerate(parts) if args is not None}
        return dict(zip(refs, self._gather(list(refs.values()))))

    def prefetch(self, rows: list[dict]) -> None:
        for r, (a, b) in enumerate(self._share(len(rows))):
            if b > a:
                self.messages.call(self.ranks[r].rollout, "prefetch", rows[a:b])

    def prepare(self, rows: list[dict]) -> list[dict]:
        shares = self._share(len(rows))
        answers = self._on_each("prepare", [(rows[a:b],) if b > a else None for a, b in shares])
        out = []
        for r, (a, b) in enumerate(shares):
            for answer in answers.get(r, []):
                if "handle" in answer:
                    answer = {**answer, "handle": (r, answer["handle"])}
                out.append(answer)
        return out

    def generate(self, handles: list, params: dict) -> list[list[dict]]:
        """Each rank generates its own prompts; per-prompt `seeds` travel with their handles, so the
        samples are those one engine would draw for the same prompts."""
        seeds = params.get("seeds") or []
        parts: list[tuple | None] = [None] * len(self.ranks)
        where: list[list[int]] = [[] for _ in self.ranks]
        for i, (rank, _) in enumerate(handles):
            where[rank].append(i)
        for rank, positions in enumerate(where):
            if positions:
                local = {**params, "seeds": [seeds[i] for i in positions]} if seeds else params
                parts[rank] = ([handles[i][1] for i in positions], local)
        answers = self._on_each("generate_prepared", parts)
        out: list = [None] * len(handles)
        for rank, positions in enumerate(where):
            for i, group in zip(positions, answers.get(rank, [])):
                out[i] = group
        return out

    def release(self, handles: list) -> None:
        per_rank: dict[int, list[int]] = {}
        for rank, local in handles:
            per_rank.setdefault(rank, []).append(local)
        for rank, local in per_rank.items():
            self.messages.call(self.ranks[rank].rollout, "release", local)

    def data_stats(self) -> dict[str, float]:
        """Summed over the engines (reads, tokens, vision passes); the slowest engine's wait and the
        largest process; each engine's generate seconds, for the idle share."""
        stats = self._gather([r.rollout.remote("data_stats") for r in self.ranks])
        out = {k: float(sum(s[k] for s in stats)) for k in stats[0]}
        out["wait_s"] = max(s["wait_s"] for s in stats)
        out["peak_rss_mb"] = max(s["peak_rss_mb"] for s in stats)
        out["generate_s_per_engine"] = [s["generate_s"] for s in stats]
        out["generate_s"] = max(out["generate_s_per_engine"])
        return out

    def first_readable(self, rows: list[dict]) -> dict | None:
        return ray.get(self.messages.call(self.ranks[0].rollout, "first_readable", rows))

    def training(self) -> dict[str, float]:
        """Every engine resets its caches and sleeps: the rank's device is the trainer's now."""
        reports = self._gather([self.messages.call(r.trainer_mode) for r in self.ranks])
        return {"sleep_s": max(x["sleep_s"] for x in reports)}

    def sync(self, version: int) -> dict[str, float]:
        """Every rank gathers its weights one FSDP unit at a time and streams them into its own
        engine (wake, load, reset, wake the KV cache)."""
        t0 = time.perf_counter()
        reports = self._gather([self.messages.call(r.sync_engine, version) for r in self.ranks])
        out = {k: max(x[k] for x in reports) if k in SYNC_MAX else float(reports[0][k]) for k in reports[0]}
        out["seconds"] = time.perf_counter() - t0
        return out

    def close(self) -> None:
        """The engines live in the ranks: they go with them."""


def idle_fraction(per_engine_s: list[float]) -> float:
    """The share of engine time spent waiting for the slowest engine of the step:
    Σᵢ (max − tᵢ) / (engines · max); 0 for one engine or an idle step."""
    slowest = max(per_engine_s, default=0.0)
    if slowest <= 0 or len(per_engine_s) < 2:
        return 0.0
    return sum(slowest - t for t in per_engine_s) / (len(per_engine_s) * slowest)
