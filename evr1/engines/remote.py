"""An engine that lives in a Ray actor: the caller's process never imports the engine's libraries.

The Prefect flow's process has no vLLM (it lives only in the GPU worker image), so eval with
`rollout.engine: vllm` runs the engine inside an `EngineWorker` actor (`evr1/engines/worker.py`)
and talks to it through its `generate(prompts, params: dict) -> list[list[dict]]` contract. Prompts
are sent as `PromptInputs` (already tokenised, media preprocessed), exactly as in training. An
engine that takes overlapping calls (vLLM's AsyncLLM) makes this one `concurrent` too.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from os import PathLike
from typing import TYPE_CHECKING, Any

import ray

from evr1.engines.base import EngineBase, Generation, SamplingParams

if TYPE_CHECKING:
    from evr1.models.adapter import PromptInputs


def _generations(rows: list[list[dict]]) -> list[list[Generation]]:
    return [[Generation(token_ids=list(g["token_ids"]), text=g["text"], finish_reason=g["finish_reason"],
                        logprobs=g.get("logprobs"))
             for g in row] for row in rows]


class RemoteEngine(EngineBase):
    """The Engine protocol over a Ray actor handle with `generate(prompts, params: dict) -> list[list[dict]]`."""

    def __init__(self, actor: Any, *, concurrent: bool = False) -> None:
        self.actor = actor
        self.concurrent = concurrent

    def _call(self, prompts: Sequence[PromptInputs], params: SamplingParams) -> ray.ObjectRef:
        return self.actor.generate.remote(list(prompts), dataclasses.asdict(params))

    def generate(self, prompts: Sequence[PromptInputs], params: SamplingParams) -> list[list[Generation]]:
        return _generations(ray.get(self._call(prompts, params)))

    async def agenerate(self, prompts: Sequence[PromptInputs], params: SamplingParams) -> list[list[Generation]]:
        # An ObjectRef is awaitable: no thread is held while the actor generates.
        return _generations(await self._call(prompts, params))

    def shutdown(self) -> None:
        """Kill the actor (and free its GPU); the engine is unusable afterwards."""
        ray.kill(self.actor)


def remote_engine(model_dir: str | PathLike, engine: str, *, batch_size: int, dtype: str,
                  num_gpus: float = 0, asynchronous: bool = False, max_concurrency: int = 64,
                  **engine_options: Any) -> RemoteEngine:
    """Start an `EngineWorker` actor running engine `engine` on `model_dir` and wait until it is built.

    `asynchronous=True` asks vLLM for its AsyncLLM (other engines ignore it); the actor then serves up
    to `max_concurrency` calls at once. Waiting here turns a worker that cannot start (no vLLM in its
    image, no GPU, a bad checkpoint) into one clear error now, instead of every eval item failing
    with it later. Ray must be started (`evr1.cluster.connect.ensure_ray`). `engine_options` go to the
    engine's constructor (e.g. vLLM's `tensor_parallel_size`).
    """
    from evr1.engines.worker import EngineWorker

    actor_cls = ray.remote(num_cpus=0, num_gpus=num_gpus, max_concurrency=max_concurrency)(EngineWorker)
    options = {"batch_size": batch_size, "dtype": dtype, "asynchronous": asynchronous, **engine_options}
    actor = actor_cls.remote(str(model_dir), engine, options)
    try:
        concurrent = bool(ray.get(actor.concurrent.remote()))
    except BaseException:
        ray.kill(actor)
        raise
    return RemoteEngine(actor, concurrent=concurrent)
