"""The rollout side: a generation engine holding a full copy of the policy, refreshed after each step.

On GPUs this is where vLLM runs (its own environment, joined to the Ray cluster); on a laptop it is
transformers' `generate`. Either way it receives the trained weights from FSDP rank 0.

The driver sends it sample rows, never frames: `prepare` reads and encodes them here (its own
`FrameReader`), answers which were readable with their handles, and `generate_prepared` samples from
those handles. `prefetch` reads the next step's rows in the background while the policy updates.

The same class serves both placements (`rollout.placement`): as a Ray actor of its own beside the
policy ranks (separate), whose weights arrive in buckets from rank 0 (`receive_weights`), or as an
object inside every policy rank (colocated, `PolicyWorker.build_engine`), whose weights are streamed
into it in-process. Its lifecycle (`wake_up`, `load_weights`, `reset_caches`, `sleep`) is recorded in
`events`, so tests can check the order a colocated engine goes through each step.

A colocated engine of a rank with a frozen vision tower shares a feature store with it
(`share_features`): each prompt it generates from is encoded once, the features kept under the
row's key and given to the engine's generation; the rank's log-prob and update passes then take
them from the same store instead of running their own tower (`PolicyWorker._encode`). One vision
pass per prompt per step, where there were two.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable
from contextlib import contextmanager
from itertools import count

import torch

from evr1.cluster.processes import peak_rss_mb
from evr1.engines import SamplingParams, make_engine
from evr1.models import load_adapter
from evr1.models.runtime import VisionPassCounter, resolve_dtype
from evr1.train.protocol import ReaderSpec, row_key
from evr1.train.seeds import seed_of
from evr1.train.workers.prompt_prep import READ_ERRORS, PromptPrep


class RolloutWorker:
    def __init__(self, model_dir: str, engine: str, options: dict, spec: ReaderSpec | None = None):
        if options.get("threads") != 0:  # 0: in a policy rank's process, which has set its own
            if options.get("cpus"):  # rollout.cpus: cores of its own (asynchronous rollouts on one machine)
                os.sched_setaffinity(0, options["cpus"])
            cores = len(options["cpus"]) if options.get("cpus") else os.cpu_count() or 1
            torch.set_num_threads(max(1, options.get("threads") or cores))
        # The engine's own generator (what `rollout.seeding: engine` samples from): a stream per engine
        # (its index among the separate workers, or its rank when colocated), so two engines never
        # draw the same noise. vLLM seeds its own; the HF engine samples from torch's global generator,
        # which a colocated engine shares with its rank (seeded alike on every rank), so its stream is
        # kept here and swapped in around each unseeded call (`_own_rng`).
        seed = seed_of(options.get("seed", 0), "engine", options.get("index", 0))
        engine_options = dict(options.get("engine_options", {}))
        if "seed" in engine_options:
            engine_options["seed"] = seed
        self._rng_seed = seed
        self._rng_state: tuple | None = None
        self.adapter = load_adapter(model_dir)
        # `device` None: the GPU Ray gave this actor if any, else the CPU. dtype "auto" (or none given):
        # bf16 on a GPU, fp32 on the CPU (`resolve_dtype`).
        self.engine = make_engine(engine, model_dir=model_dir, batch_size=options["batch_size"],
                                  dtype=resolve_dtype(options.get("dtype"), options.get("device")),
                                  device=options.get("device"),
                                  **engine_options)
        self.prep = PromptPrep(self.adapter, spec, limit=options.get("prefetch_prompts", 64)) if spec else None
        self.vision_passes = VisionPassCounter(getattr(self.engine, "model", None))
        self._prompts: dict[int, object] = {}
        self._keys: dict[int, str] = {}  # handle → its row's key (the feature store's key)
        self.features: dict | None = None  # row key → VisualFeatures on the CPU, shared with the rank
        self._handles = count()
        self.events: list[str] = []  # the lifecycle, in order (see the module docstring)
        self.version = 0  # the policy version the engine's weights are (0: the checkpoint it was built from)
        self.generate_s = 0.0  # seconds spent generating since the last `data_stats`
        self.generated_tokens = 0

    def generate(self, prompts: list, params: dict, visual: list | None = None) -> list[list[dict]]:
        t0 = time.perf_counter()
        extra = {"visual": visual} if visual is not None else {}
        sampling = SamplingParams(**params)
        with self._own_rng(unseeded=not sampling.seeds and sampling.seed is None and not sampling.greedy):
            outs = self.engine.generate(prompts, sampling, **extra)
        self.generate_s += time.perf_counter() - t0
        self.generated_tokens += sum(len(g.token_ids) for group in outs for g in group)
        self.events.append("generate")
        return [[{"token_ids": g.token_ids, "text": g.text, "finish_reason": g.finish_reason, "logprobs": g.logprobs}
                 for g in group] for group in outs]

    @contextmanager
    def _own_rng(self, *, unseeded: bool):
        """Around an unseeded call, torch's generators hold this engine's stream (seeded from the run
        seed and the engine's index on first use, continued after), and get their state back after."""
        if not unseeded:
            yield
            return
        cuda = torch.cuda.is_available() and torch.device(getattr(self.engine, "device", "cpu")).type == "cuda"
        with torch.random.fork_rng(devices=[torch.cuda.current_device()] if cuda else []):
            if self._rng_state is None:
                torch.manual_seed(self._rng_seed)
            else:
                torch.set_rng_state(self._rng_state[0])
                if cuda:
                    torch.cuda.set_rng_state(self._rng_state[1])
            try:
                yield
            finally:
                self._rng_state = (torch.get_rng_state(), torch.cuda.get_rng_state() if cuda else None)

    # -- rows in, generations out (the trainer's path) ----------------------------------------------

    def prefetch(self, rows: list[dict]) -> None:
        self.prep.prefetch(rows)

    def prepare(self, rows: list[dict]) -> list[dict]:
        """Read and encode each row here: {"handle", "prompt_tokens"} when readable, {"error"} when not."""
        out = []
        for row in rows:
            try:
                prompt = self.prep.get(row)
            except READ_ERRORS as e:
                out.append({"error": f"sample {row_key(row)}: {e}"})
                continue
            handle = next(self._handles)
            self._prompts[handle] = prompt
            self._keys[handle] = row_key(row)
            out.append({"handle": handle, "prompt_tokens": len(prompt)})
        self.prep.release()
        return out

    def generate_prepared(self, handles: list[int], params: dict) -> list[list[dict]]:
        prompts = [self._prompts[h] for h in handles]
        if self.features is None:
            return self.generate(prompts, params)
        t0 = time.perf_counter()
        visual = self._shared_features(handles, prompts)
        self.generate_s += time.perf_counter() - t0  # encoding is part of generating
        return self.generate(prompts, params, visual=visual)

    def release(self, handles: list[int]) -> None:
        for h in handles:
            self._prompts.pop(h, None)
            self._keys.pop(h, None)

    # -- vision features shared with the rank (colocated, frozen tower) -----------------------------

    def share_features(self, store: dict) -> None:
        """Keep each generated prompt's vision features in `store` (row key → `VisualFeatures` on the
        CPU, in the engine's dtype), and take them from there when present. The rank owning `store`
        reads them in its passes and clears it at the end of its step: only for a frozen tower,
        whose features do not change with the weights, and an engine whose dtype is the rank's."""
        if not getattr(self.engine, "accepts_visual", False):
            raise ValueError(f"share_features: the {type(self.engine).__name__} engine takes no precomputed vision features")
        self.features = store

    def _shared_features(self, handles: list[int], prompts: list) -> list:
        """Each prompt's features from the store; a missing one encoded here and stored. One tower
        call per prompt, as the rank encodes and as per-prompt seeds generate (a prompt alone): its
        features, hence its samples, never depend on the other prompts of the call. None for a
        text-only prompt."""
        from evr1.models.shared_prefix import media_counts

        keys = [self._keys[h] for h in handles]
        fresh = {}  # encoded now: generation takes them where they are (the engine's device)
        for key, prompt in zip(keys, prompts):
            if key not in self.features and key not in fresh and media_counts(prompt):
                (fresh[key],) = self.engine.encode_visual([prompt])
                self.features[key] = fresh[key].to("cpu")
        return [fresh[k] if k in fresh else self.features.get(k) for k in keys]

    def data_stats(self) -> dict[str, float]:
        """Since the last call: seconds spent waiting for frames, cache hits and misses; and this
        process's peak RSS (MB)."""
        out = {"wait_s": self.prep.take_wait(), "peak_rss_mb": peak_rss_mb(), **self.prep.take_reads(),
               "vision_passes": self.vision_passes.take(), "generate_s": self.generate_s,
               "generated_tokens": float(self.generated_tokens)}
        self.generate_s, self.generated_tokens = 0.0, 0
        return out

    # -- weights and lifecycle ---------------------------------------------------------------------

    @property
    def weight_dtype(self) -> torch.dtype:
        """The dtype the engine holds its weights in: what a sync sends (bf16 for a bf16 engine)."""
        dtype = getattr(self.engine, "dtype", None)
        if isinstance(dtype, torch.dtype):
            return dtype
        return next(self.engine.model.parameters()).dtype

    @property
    def tied_names(self) -> bool:
        """Whether a sync sends a tied tensor under each of its names (`EngineBase.sync_tied_names`)."""
        return bool(getattr(self.engine, "sync_tied_names", False))

    def expected_names(self) -> set[str] | None:
        """Every weight name a complete sync must send (parameters and persistent buffers, a tied
        weight once), for engines whose model this process can see (HF); None for vLLM, whose
        workers check their own layers as the layerwise reload finalises."""
        from evr1.train.weight_sync import sync_names

        model = getattr(self.engine, "model", None)
        return None if model is None else set(sync_names(model, self.tied_names))  # the iterator's rule

    def wake_up(self, tags: tuple[str, ...] = ("weights", "kv_cache")) -> None:
        """Bring back what `sleep` freed (vLLM on a GPU with sleep mode); a no-op elsewhere."""
        self.events.append("wake:" + ",".join(tags))
        wake = getattr(self.engine, "wake_up", None)
        if wake is not None:
            wake(list(tags))

    def sleep(self, level: int) -> None:
        """Free the KV cache (level 1) and the weights (level 2) while the rank trains; level 0 and
        engines without sleep mode (HF, vLLM on the CPU) keep everything."""
        self.events.append(f"sleep:{level}")
        sleep = getattr(self.engine, "sleep", None)
        if level and sleep is not None:
            sleep(level)

    def reset_caches(self) -> None:
        """Forget what was computed with earlier weights: vLLM's prefix and encoder caches (its
        `update_weights` resets them after a load too). HF keeps none between calls."""
        self.events.append("reset")
        reset = getattr(self.engine, "reset_caches", None)
        if reset is not None:
            reset()

    def load_weights(self, items: Iterable[tuple[str, torch.Tensor]], version: int) -> dict[str, float]:
        """Stream (name, tensor) pairs into the engine in place; `items` may be a collective
        generator (`weight_sync.iter_sync_weights`) that gathers one FSDP unit at a time as it is
        consumed. Returns tensors, bytes and the load's seconds (gathering included)."""
        from evr1.train.weight_sync import check_complete

        sent: list[str] = []
        nbytes = 0

        def counted():
            nonlocal nbytes
            for name, tensor in items:
                sent.append(name)
                nbytes += tensor.numel() * tensor.element_size()
                yield name, tensor

        t0 = time.perf_counter()
        update = getattr(self.engine, "update_weights")
        update(counted())
        expected = self.expected_names()
        if expected is not None:
            check_complete(sent, expected, where=f"rollout engine sync to version {version}")
        self.version = version
        self.events.append("load")
        return {"tensors": float(len(sent)), "bytes": float(nbytes), "load_s": time.perf_counter() - t0}

    def join_broadcast(self, endpoint: str, member: int, size: int) -> bool:
        """Join the weight broadcast group (`transport.BroadcastGroup`) as member `member` of `size`.
        Returns whether this engine needs tied tensors under each name (`tied_names`): what rank 0 sends."""
        from evr1.train.transport import BroadcastGroup

        self.broadcast = BroadcastGroup(endpoint, member, size)
        return self.tied_names

    def receive_weights(self, version: int) -> dict[str, float]:
        """The separate placement's side of a sync: the buckets policy rank 0 broadcasts, each
        loaded into the engine as it arrives; then the caches reset. No whole state dict exists in
        any process."""
        self.wake_up(("weights",))
        report = self.load_weights(self.broadcast.receive(), version)
        self.reset_caches()
        self.wake_up(("kv_cache",))
        return report

    def engine_params(self) -> dict[str, torch.Tensor] | None:
        """The HF engine's weights (tests compare them with the policy's after a sync)."""
        model = getattr(self.engine, "model", None)
        return None if model is None else {k: v.detach().clone() for k, v in model.state_dict().items()}

    def first_readable(self, rows: list[dict]) -> dict | None:
        """The first row whose media can be read here (None when none can): the input the trainer's
        final logits probe runs on (`PolicyWorker.probe_logits`)."""
        for row in rows:
            try:
                self.prep.get(row)
            except READ_ERRORS:
                continue
            finally:
                self.prep.release()
            return row
        return None
