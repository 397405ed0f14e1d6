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

import threading
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
    """`rollout.engines` rollout worker actors beside the policy ranks (each its own device).

    Prompts are shared out in contiguous, equal shares (all samples of a prompt on one worker);
    handles are (worker, local handle). A sync is a broadcast: every rank gathers its weights one
    FSDP unit at a time, rank 0 broadcasts them in buckets to every worker at once over a gloo group
    of their own (`transport.BroadcastGroup`), nothing through the driver or Ray's object store.
    `submit_lock` orders the driver's calls to the ranks when two threads make them (asynchronous
    rollouts): every rank must see the collectives in the same order."""

    placement = "separate"

    def __init__(self, actors: list, ranks: list, messages: MessageLog, *, weight_dtype: str, bucket_bytes: int,
                 gather=ray.get, submit_lock=None, updates=lambda: 0):
        self.actors, self.ranks, self.messages = actors, ranks, messages
        self.weight_dtype, self.bucket_bytes, self._gather = weight_dtype, bucket_bytes, gather
        self._lock = submit_lock if submit_lock is not None else threading.Lock()
        self._updates = updates
        self._joined = False
        self._tied_names = False  # whether the workers' engines need tied tensors under each name (at the join)
        self.version = 0  # the policy version the workers hold (0: the checkpoint they were built from)

    def _shares(self, n: int) -> list[tuple[int, int]]:
        return _contiguous(n, len(self.actors))

    def prefetch(self, rows: list[dict]) -> None:
        for w, (a, b) in enumerate(self._shares(len(rows))):
            if b > a:
                self.messages.call(self.actors[w].prefetch, rows[a:b])

    def prepare(self, rows: list[dict]) -> list[dict]:
        shares = self._shares(len(rows))
        refs = [self.messages.call(self.actors[w].prepare, rows[a:b]) if b > a else None
                for w, (a, b) in enumerate(shares)]
        out = []
        for w, ref in enumerate(refs):
            for answer in (ray.get(ref) if ref is not None else []):
                out.append({**answer, "handle": (w, answer["handle"])} if "handle" in answer else answer)
        return out

    def generate(self, handles: list, params: dict) -> list[list[dict]]:
        return _generate_by_owner(handles, params, len(self.actors),
                                  lambda w, local, p: self.messages.call(self.actors[w].generate_prepared, local, p),
                                  self._gather)

    def release(self, handles: list) -> None:
        for w, local in _by_owner(handles).items():
            self.messages.call(self.actors[w].release, local)  # ordered after generate: an actor runs calls in turn

    def data_stats(self) -> dict[str, float]:
        return _summed(self._gather([a.data_stats.remote() for a in self.actors]))

    def first_readable(self, rows: list[dict]) -> dict | None:
        return ray.get(self.messages.call(self.actors[0].first_readable, rows))

    def training(self) -> dict[str, float]:
        """Separate workers keep their devices: nothing to put to sleep."""
        return {}

    def _join(self) -> None:
        """Rank 0 and the workers form the broadcast group (once, on the first sync)."""
        endpoint = ray.get(self.ranks[0].broadcast_endpoint.remote())
        size = len(self.actors) + 1
        joined = self._gather([self.ranks[0].join_broadcast.remote(endpoint, size),
                               *[a.join_broadcast.remote(endpoint, w + 1, size) for w, a in enumerate(self.actors)]])
        self._tied_names = any(joined[1:])  # the workers' answers (rank 0's is None)
        self._joined = True

    def sync(self, version: int | None = None) -> dict[str, float]:
        """The policy's current weights to every worker; `version` None: the number of updates
        submitted to the ranks before this sync (read under the submit lock, so exact)."""
        if not self._joined:
            self._join()
        t0 = time.perf_counter()
        with self._lock:
            version = self._updates() if version is None else version
            sends = [self.messages.call(r.send_weights, self.weight_dtype, self.bucket_bytes, self._tied_names)
                     for r in self.ranks]
        receives = [self.messages.call(a.receive_weights, version) for a in self.actors]
        out = self._gather([*receives, *sends])
        got, sent = out[: len(receives)], out[len(receives)]
        report = {k: max(r[k] for r in got) if k.endswith("_s") else float(got[0][k]) for k in got[0]}
        report.update({"gather_s": sent["gather_s"], "buckets": sent.get("buckets", 0.0),
                       "send_s": sent.get("send_s", 0.0), "version": float(version)})
        report["seconds"] = time.perf_counter() - t0
        self.version = version
        return report

    def close(self) -> None:
        """The workers and their group go with the actor group."""


def _contiguous(n: int, k: int) -> list[tuple[int, int]]:
    """Contiguous (start, stop) of `n` items over `k` owners, the first owners one more when uneven."""
    bounds, start = [], 0
    for r in range(k):
        stop = start + n // k + (r < n % k)
        bounds.append((start, stop))
        start = stop
    return bounds


def _by_owner(handles: list) -> dict[int, list]:
    out: dict[int, list] = {}
    for owner, local in handles:
        out.setdefault(owner, []).append(local)
    return out


def _generate_by_owner(handles: list, params: dict, owners: int, call, gather) -> list[list[dict]]:
    """Each owner generates its own prompts; per-prompt `seeds` travel with their handles, so the
    samples are those one engine would draw for the same prompts."""
    seeds = params.get("seeds") or []
    where: list[list[int]] = [[] for _ in range(owners)]
    for i, (owner, _) in enumerate(handles):
        where[owner].append(i)
    refs = {}
    for owner, positions in enumerate(where):
        if positions:
            local = {**params, "seeds": [seeds[i] for i in positions]} if seeds else params
            refs[owner] = call(owner, [handles[i][1] for i in positions], local)
    answers = dict(zip(refs, gather(list(refs.values()))))
    out: list = [None] * len(handles)
    for owner, positions in enumerate(where):
        for i, group in zip(positions, answers.get(owner, [])):
            out[i] = group
    return out


def _summed(stats: list[dict]) -> dict:
    """Engines' data stats: counts summed, the slowest engine's wait, the largest process, and each
    engine's generate seconds (for the idle share)."""
    out = {k: float(sum(s[k] for s in stats)) for k in stats[0]}
    out["wait_s"] = max(s["wait_s"] for s in stats)
    out["peak_rss_mb"] = max(s["peak_rss_mb"] for s in stats)
    out["generate_s_per_engine"] = [s["generate_s"] for s in stats]
    out["generate_s"] = max(out["generate_s_per_engine"])
    return out


class ColocatedRollout:
    """An engine in every policy rank (`PolicyWorker.build_engine`); `ranks` are the rank actors."""

    placement = "colocated"

    def __init__(self, ranks: list, messages: MessageLog, *, gather=ray.get):
        self.ranks, self.messages, self._gather = ranks, messages, gather
        self.version = 0  # the policy version the engines hold (0: the checkpoint they were built from)

    def _share(self, n: int) -> list[tuple[int, int]]:
        return _contiguous(n, len(self.ranks))

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
        return _generate_by_owner(handles, params, len(self.ranks),
                                  lambda r, local, p: self.messages.call(self.ranks[r].rollout, "generate_prepared", local, p),
                                  self._gather)

    def release(self, handles: list) -> None:
        for rank, local in _by_owner(handles).items():
            self.messages.call(self.ranks[rank].rollout, "release", local)

    def data_stats(self) -> dict[str, float]:
        return _summed(self._gather([r.rollout.remote("data_stats") for r in self.ranks]))

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
        out["version"] = float(version)
        self.version = version
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
