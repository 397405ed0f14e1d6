"""The rollout side of a policy rank: the engine it holds (colocated) or the broadcast it sends to
separate rollout workers, and the weight sync either way. Mixed into `PolicyWorker`, whose `model`,
`rank`, `device`, `model_dir`, `spec` and `_visual` it uses."""

from __future__ import annotations

import time

import torch


class EngineHost:
    # -- the colocated engine (rollout.placement: colocated) -----------------------------------------

    def build_engine(self, engine: str, options: dict, sleep_level: int) -> None:
        """An engine in this rank's process, on its device (`RolloutWorker`, which reads and encodes
        its own prompts). It starts from the checkpoint; the trainer syncs it before step 1."""
        from evr1.train.workers.rollout import RolloutWorker

        self.engine = RolloutWorker(self.model_dir, engine, {**options, "threads": 0, "index": self.rank}, self.spec)
        self.sleep_level = sleep_level
        # A frozen tower's features are the same in the engine and here: the engine encodes each
        # prompt it generates from once, into this rank's store (`_visual`), and `_encode` finds them
        # there. Only where the engine computes in this rank's dtype (HF: fp32 on the CPU, bf16 on a
        # GPU under bf16 mixed precision) and takes precomputed features (not vLLM).
        self.shares_visual = (self.reuse_visual and getattr(self.engine.engine, "accepts_visual", False)
                              and self.engine.weight_dtype == self.dtype)
        if self.shares_visual:
            self.engine.share_features(self._visual)

    ROLLOUT_CALLS = frozenset({"prefetch", "prepare", "generate_prepared", "release", "data_stats",
                               "first_readable", "engine_params"})

    def rollout(self, method: str, *args):
        """A call on this rank's engine (`ColocatedRollout`), one of `ROLLOUT_CALLS`."""
        if method not in self.ROLLOUT_CALLS:
            raise ValueError(f"PolicyWorker.rollout: unknown engine call {method!r} (known: {sorted(self.ROLLOUT_CALLS)})")
        return getattr(self.engine, method)(*args)

    def engine_events(self) -> list[str]:
        return list(self.engine.events)

    def sync_engine(self, version: int) -> dict[str, float]:
        """Collective: gather the policy one FSDP unit at a time, cast to the engine's dtype, and
        stream it into this rank's engine in-process (no state dict, nothing through Ray); then reset
        its caches and wake its KV cache. Seconds split into wake / gather / load / reset."""
        from evr1.train.weight_sync import iter_sync_weights

        t0 = time.perf_counter()
        self.engine.wake_up(("weights",))
        t1 = time.perf_counter()
        gather = _Timed(iter_sync_weights(self.model, dtype=self.engine.weight_dtype, tied_names=self.engine.tied_names))
        report = self.engine.load_weights(gather, version)
        t2 = time.perf_counter()
        self.engine.reset_caches()
        t3 = time.perf_counter()
        self.engine.wake_up(("kv_cache",))
        t4 = time.perf_counter()
        return {"tensors": report["tensors"], "bytes": report["bytes"], "buckets": 0.0,
                "gather_s": gather.seconds, "load_s": (t2 - t1) - gather.seconds, "reset_s": t3 - t2,
                "wake_s": (t1 - t0) + (t4 - t3)}

    def trainer_mode(self) -> dict[str, float]:
        """The engine's caches reset and asleep (at `rollout.sleep_level`) while this rank trains."""
        t0 = time.perf_counter()
        self.engine.reset_caches()
        self.engine.sleep(self.sleep_level)
        if self.device == "cuda":
            torch.cuda.empty_cache()
        return {"sleep_s": time.perf_counter() - t0}

    def broadcast_endpoint(self) -> str:
        """Rank 0: an address for the weight broadcast group's store, free on this node."""
        from evr1.train.transport import free_endpoint

        return free_endpoint()

    def join_broadcast(self, endpoint: str, size: int) -> None:
        """Rank 0 becomes member 0 (the sender) of the weight broadcast group with the rollout workers."""
        from evr1.train.transport import BroadcastGroup

        self.broadcast = BroadcastGroup(endpoint, 0, size)

    def send_weights(self, dtype: str, bucket_bytes: int, tied_names: bool = False) -> dict[str, float]:
        """Collective, for separate rollout workers: every rank gathers (one FSDP unit at a time);
        rank 0 broadcasts the tensors in buckets of `bucket_bytes` to every worker at once
        (`transport.BroadcastGroup`): nothing through the driver or Ray's object store. `tied_names`:
        what the workers' engines need (`RolloutWorker.tied_names`)."""
        from evr1.train.weight_sync import iter_sync_weights

        gather = _Timed(iter_sync_weights(self.model, dtype=getattr(torch, dtype), tied_names=tied_names))
        if getattr(self, "broadcast", None) is None:
            for _ in gather:
                pass
            return {"gather_s": gather.seconds}
        t0 = time.perf_counter()
        sent = self.broadcast.send(gather, bucket_bytes)
        return {**sent, "gather_s": gather.seconds, "send_s": time.perf_counter() - t0 - gather.seconds}



class _Timed:
    """Iterates `items`, adding the seconds spent producing each item (the gather) to `seconds`."""

    def __init__(self, items):
        self.items, self.seconds = iter(items), 0.0

    def __iter__(self):
        return self

    def __next__(self):
        t0 = time.perf_counter()
        try:
            return next(self.items)
        finally:
            self.seconds += time.perf_counter() - t0
