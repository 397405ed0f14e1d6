"""`EnginePool`: several engine replicas (one per GPU) behind one engine, fed from the caller's one queue.

Data-parallel evaluation: the eval runner keeps up to `concurrency` calls in flight on a concurrent
engine, and the pool hands each call to the replica with the fewest calls in flight, so every GPU
takes batches from the same queue and none idles while another has a backlog. A replica that is not
itself concurrent (the HF engine) gets one call at a time.
"""

from __future__ import annotations

from dataclasses import replace

import asyncio
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

from evr1.engines.base import Engine, EngineBase, Generation, SamplingParams

if TYPE_CHECKING:
    from evr1.models.adapter import PromptInputs


class EnginePool(EngineBase):
    """The Engine protocol over `engines`; calls go to the least busy replica. Always `concurrent`."""

    concurrent = True

    def __init__(self, engines: Sequence[Engine], *, close: Callable[[], None] = lambda: None) -> None:
        if not engines:
            raise ValueError("EnginePool: field engines is empty")
        self.engines = list(engines)
        self.in_flight = [0] * len(self.engines)
        self.calls = [0] * len(self.engines)  # per replica, for the caller's report (and tests)
        self._close = close
        self._locks: dict[int, list[asyncio.Lock]] = {}  # per event loop: a lock is bound to its loop

    def _pick(self) -> int:
        return min(range(len(self.engines)), key=lambda k: (self.in_flight[k], self.calls[k]))

    async def agenerate(self, prompts: Sequence[PromptInputs], params: SamplingParams) -> list[list[Generation]]:
        k = self._pick()
        engine = self.engines[k]
        self.in_flight[k] += 1
        self.calls[k] += 1
        try:
            if getattr(engine, "concurrent", False):
                return await engine.agenerate(prompts, params)
            loop = id(asyncio.get_running_loop())
            locks = self._locks.setdefault(loop, [asyncio.Lock() for _ in self.engines])
            async with locks[k]:  # a blocking engine is not thread-safe: one call at a time per replica
                return await engine.agenerate(prompts, params)
        finally:
            self.in_flight[k] -= 1

    def generate(self, prompts: Sequence[PromptInputs], params: SamplingParams) -> list[list[Generation]]:
        """Split `prompts` into one contiguous share per replica, generate the shares in parallel, in order."""
        n = len(self.engines)
        bounds = [len(prompts) * k // n for k in range(n + 1)]
        seeds = params.prompt_seeds(len(prompts))  # per-prompt seeds travel with their prompts
        shares = [(self.engines[k], prompts[bounds[k]:bounds[k + 1]],
                   params if seeds is None else replace(params, seeds=tuple(seeds[bounds[k]:bounds[k + 1]])))
                  for k in range(n) if bounds[k] < bounds[k + 1]]
        with ThreadPoolExecutor(max_workers=len(shares) or 1) as pool:
            outs = list(pool.map(lambda share: share[0].generate(share[1], share[2]), shares))
        return [row for out in outs for row in out]

    def shutdown(self) -> None:
        """Release every replica (kill their actors)."""
        self._close()
