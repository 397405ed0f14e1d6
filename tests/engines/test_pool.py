"""EnginePool: data-parallel replicas behind one engine. Every replica takes calls from the one queue,
a blocking replica never gets two calls at once, and the outputs come back in the prompts' order."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from evr1.engines import EngineBase, Generation, SamplingParams
from evr1.engines.pool import EnginePool

PARAMS = SamplingParams(max_new_tokens=1)


class Replica(EngineBase):
    """Answers each prompt with `<name>:<prompt>`; records how many calls overlapped inside it."""

    def __init__(self, name: str):
        self.name, self.active, self.most = name, 0, 0
        self._guard = threading.Lock()

    def generate(self, prompts, params):
        with self._guard:
            self.active += 1
            self.most = max(self.most, self.active)
        time.sleep(0.02)
        with self._guard:
            self.active -= 1
        return [[Generation(token_ids=[], text=f"{self.name}:{p}", finish_reason="stop")] for p in prompts]


def test_calls_spread_over_replicas_one_at_a_time_each():
    replicas = [Replica("a"), Replica("b")]
    pool = EnginePool(replicas)

    async def main():
        return await asyncio.gather(*(pool.agenerate([f"p{k}"], PARAMS) for k in range(8)))

    outs = asyncio.run(main())
    assert [o[0][0].text.split(":")[1] for o in outs] == [f"p{k}" for k in range(8)]
    assert pool.calls == [4, 4] and all(r.most == 1 for r in replicas)
    again = asyncio.run(main())  # a second event loop works too (locks are per loop)
    assert [o[0][0].text.split(":")[1] for o in again] == [f"p{k}" for k in range(8)] and pool.calls == [8, 8]


def test_blocking_generate_splits_in_order():
    pool = EnginePool([Replica("a"), Replica("b"), Replica("c")])
    outs = pool.generate([f"p{k}" for k in range(5)], PARAMS)
    assert [o[0].text.split(":")[1] for o in outs] == [f"p{k}" for k in range(5)]
    assert {o[0].text.split(":")[0] for o in outs} == {"a", "b", "c"}


def test_an_empty_pool_is_refused():
    with pytest.raises(ValueError, match="engines"):
        EnginePool([])


class SeedEcho(EngineBase):
    """Answers each prompt with the seed it was given for it (and checks the count, as engines do)."""

    def generate(self, prompts, params):
        seeds = params.prompt_seeds(len(prompts))
        return [[Generation(token_ids=[], text=f"{p}:{s}", finish_reason="stop")] for p, s in zip(prompts, seeds)]


def test_blocking_generate_gives_each_prompt_its_own_seed():
    pool = EnginePool([SeedEcho(), SeedEcho(), SeedEcho()])
    outs = pool.generate([f"p{k}" for k in range(5)], SamplingParams(max_new_tokens=1, seeds=(10, 11, 12, 13, 14)))
    assert [o[0].text for o in outs] == [f"p{k}:{10 + k}" for k in range(5)]
