"""`EngineWorker`: any engine inside an asyncio Ray actor, for callers that must not import it.

The eval stage runs in the Prefect flow's process, which has no vLLM. It starts this actor on a GPU
worker (`remote_engine`), sends tokenised `PromptInputs`, and awaits the results. With vLLM's
`AsyncLLM` (`asynchronous=True`) the actor serves many `generate` calls at once and vLLM batches
them continuously; with a blocking engine the calls run one after another in a thread.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

from evr1.engines.base import SamplingParams, make_engine


class EngineWorker:
    def __init__(self, model_dir: str, engine: str, options: dict[str, Any]):
        import torch

        torch.set_num_threads(max(1, int(options.get("threads") or os.cpu_count() or 1)))
        kwargs = {k: v for k, v in options.items() if k != "threads"}
        self.engine = make_engine(engine, model_dir=model_dir, **kwargs)
        self._lock = asyncio.Lock()

    def concurrent(self) -> bool:
        return bool(getattr(self.engine, "concurrent", False))

    async def generate(self, prompts: list, params: dict) -> list[list[dict]]:
        sampling = SamplingParams(**params)
        if self.concurrent():
            outs = await self.engine.agenerate(prompts, sampling)
        else:
            async with self._lock:  # a blocking engine is not thread-safe: one call at a time
                outs = await self.engine.agenerate(prompts, sampling)
        return [[{"token_ids": g.token_ids, "text": g.text, "finish_reason": g.finish_reason, "logprobs": g.logprobs}
                 for g in group] for group in outs]
