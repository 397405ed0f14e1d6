"""The rollout side: a generation engine holding a full copy of the policy, refreshed after each step.

On GPUs this is where vLLM runs (its own environment, joined to the Ray cluster); on a laptop it is
transformers' `generate`. Either way it receives the trained weights from FSDP rank 0.

The driver sends it sample rows, never frames: `prepare` reads and encodes them here (its own
`FrameReader`), answers which were readable with their handles, and `generate_prepared` samples from
those handles. `prefetch` reads the next step's rows in the background while the policy updates.
"""

from __future__ import annotations

import os
from itertools import count

import torch

from evr1.cluster.processes import peak_rss_mb
from evr1.engines import SamplingParams, make_engine
from evr1.models import load_adapter
from evr1.models.runtime import VisionPassCounter, resolve_dtype
from evr1.train.protocol import ReaderSpec, row_key
from evr1.train.workers.prompt_prep import READ_ERRORS, PromptPrep


class RolloutWorker:
    def __init__(self, model_dir: str, engine: str, options: dict, spec: ReaderSpec | None = None):
        torch.set_num_threads(max(1, options.get("threads", os.cpu_count() or 1)))
        self.adapter = load_adapter(model_dir)
        # `device` None: the GPU Ray gave this actor if any, else the CPU. dtype "auto" (or none given):
        # bf16 on a GPU, fp32 on the CPU (`resolve_dtype`).
        self.engine = make_engine(engine, model_dir=model_dir, batch_size=options["batch_size"],
                                  dtype=resolve_dtype(options.get("dtype"), options.get("device")),
                                  device=options.get("device"),
                                  **options.get("engine_options", {}))
        self.prep = PromptPrep(self.adapter, spec, limit=options.get("prefetch_prompts", 64)) if spec else None
        self.vision_passes = VisionPassCounter(getattr(self.engine, "model", None))
        self._prompts: dict[int, object] = {}
        self._handles = count()

    def generate(self, prompts: list, params: dict) -> list[list[dict]]:
        outs = self.engine.generate(prompts, SamplingParams(**params))
        return [[{"token_ids": g.token_ids, "text": g.text, "finish_reason": g.finish_reason, "logprobs": g.logprobs}
                 for g in group] for group in outs]

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
            out.append({"handle": handle, "prompt_tokens": len(prompt)})
        self.prep.release()
        return out

    def generate_prepared(self, handles: list[int], params: dict) -> list[list[dict]]:
        return self.generate([self._prompts[h] for h in handles], params)

    def release(self, handles: list[int]) -> None:
        for h in handles:
            self._prompts.pop(h, None)

    def data_stats(self) -> dict[str, float]:
        """Since the last call: seconds spent waiting for frames, cache hits and misses; and this
        process's peak RSS (MB)."""
        return {"wait_s": self.prep.take_wait(), "peak_rss_mb": peak_rss_mb(), **self.prep.take_reads(),
                "vision_passes": self.vision_passes.take()}

    # -- weights -----------------------------------------------------------------------------------

    def set_weights(self, state_dict: dict) -> dict[str, float]:
        """Load the policy's weights into the engine; what the hand-over moved (vLLM: tensors, bytes,
        buckets, seconds), {} for the HF engine's in-place load."""
        update = getattr(self.engine, "update_weights", None)
        if update is None:
            self.engine.model.load_state_dict(state_dict)
            return {}
        report = update(state_dict)
        return {k: float(v) for k, v in report.as_dict().items()} if hasattr(report, "as_dict") else {}

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
