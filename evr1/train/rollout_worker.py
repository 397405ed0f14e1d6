"""The rollout side: a generation engine holding a full copy of the policy, refreshed after each step.

On GPUs this is where vLLM runs (its own environment, joined to the Ray cluster); on a laptop it is
transformers' `generate`. Either way it receives the trained weights from FSDP rank 0.
"""

from __future__ import annotations

import os

import torch

from evr1.engines import SamplingParams, make_engine
from evr1.models import load_adapter


class RolloutWorker:
    def __init__(self, model_dir: str, engine: str, options: dict):
        torch.set_num_threads(max(1, options.get("threads", os.cpu_count() or 1)))
        self.adapter = load_adapter(model_dir)
        # `device` None: the GPU Ray gave this actor if any, else the CPU.
        self.engine = make_engine(engine, model_dir=model_dir, batch_size=options["batch_size"],
                                  dtype=options.get("dtype", "float32"), device=options.get("device"))

    def generate(self, prompts: list, params: dict) -> list[list[dict]]:
        outs = self.engine.generate(prompts, SamplingParams(**params))
        return [[{"token_ids": g.token_ids, "text": g.text, "finish_reason": g.finish_reason} for g in group]
                for group in outs]

    def set_weights(self, state_dict: dict) -> None:
        update = getattr(self.engine, "update_weights", None)
        if update is not None:
            update(state_dict)
        else:
            self.engine.model.load_state_dict(state_dict)

    def probe_logits(self, prompt, response: list[int]) -> dict:
        """Logits of the current weights on one fixed input: merge checks its output against them."""
        batch = self.adapter.collate([prompt], [response])
        model = self.engine.model
        with torch.no_grad():
            logits = model(**batch.to(model.device).model_inputs()).logits.float().cpu()
        return {"inputs": {k: v.cpu() for k, v in batch.model_inputs().items()}, "logits": logits}
