"""vLLM engine for GPU workers (the `gpu` extra / worker image). Never imported on CPU machines.

Prompts go in as the token ids `encode_prompt` built (already expanded, Qwen3-VL timestamps
included) plus the raw resized media, so vLLM's prompt equals the trainer's token for token;
vLLM recognises the expanded placeholders and only runs its vision preprocessing. Frames arrive
already sampled and resized, so resizing and frame sampling are switched off.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping, Sequence
from os import PathLike
from typing import Any

from evr1.engines.base import EngineBase, Generation, SamplingParams
from evr1.models.adapter import PromptInputs, VisionLanguageAdapter
from evr1.models.text import TextAdapter, load_any_adapter

# vLLM clamps logit biases to ±100; −100 removes a token from sampling in practice.
SUPPRESS_BIAS = -100.0
MM_PROCESSOR_KWARGS = {"do_resize": False, "do_sample_frames": False}


def _video_item(clip: Any) -> tuple[Any, dict[str, Any]]:
    """(T×H×W×3 uint8 frames, metadata) — the native fps and indices drive Qwen3-VL timestamps."""
    t, h, w = clip.frames.shape[:3]
    return clip.frames, {
        "fps": float(clip.fps),
        "frames_indices": [int(i) for i in clip.frame_indices],
        "total_num_frames": int(clip.total_frames),
        "duration": float(clip.duration),
        "video_backend": "evr1",
        "height": int(h),
        "width": int(w),
        "do_sample_frames": False,
    }


class VLLMEngine(EngineBase):
    """`vllm.LLM` (blocking) or `vllm.v1.engine.async_llm.AsyncLLM` (asyncio) behind the Engine protocol."""

    def __init__(self, llm: Any, adapter: VisionLanguageAdapter | TextAdapter, *, asynchronous: bool = False) -> None:
        self.llm = llm
        self.adapter = adapter
        self.asynchronous = asynchronous
        self.concurrent = asynchronous  # AsyncLLM: overlapping requests are what it is for

    @classmethod
    def from_pretrained(
        cls,
        model_dir: str | PathLike,
        *,
        asynchronous: bool = False,
        dtype: str = "bfloat16",
        tensor_parallel_size: int = 1,
        gpu_memory_utilization: float = 0.6,
        max_model_len: int | None = None,
        limit_mm_per_prompt: Mapping[str, int] | None = None,
        seed: int = 0,
        **engine_kwargs: Any,
    ) -> VLLMEngine:
        args = dict(
            model=str(model_dir),
            dtype=dtype,
            tensor_parallel_size=tensor_parallel_size,
            gpu_memory_utilization=gpu_memory_utilization,
            max_model_len=max_model_len,
            limit_mm_per_prompt=dict(limit_mm_per_prompt or {"image": 4, "video": 2}),
            mm_processor_kwargs=dict(MM_PROCESSOR_KWARGS),
            seed=seed,
            **engine_kwargs,
        )
        if asynchronous:
            from vllm.engine.arg_utils import AsyncEngineArgs
            from vllm.v1.engine.async_llm import AsyncLLM

            llm = AsyncLLM.from_engine_args(AsyncEngineArgs(**args))
        else:
            from vllm import LLM

            llm = LLM(**args)
        return cls(llm, load_any_adapter(model_dir), asynchronous=asynchronous)

    def _request(self, prompt: PromptInputs) -> dict[str, Any]:
        data: dict[str, Any] = {}
        if prompt.videos:
            data["video"] = [_video_item(c) for c in prompt.videos]
        if prompt.images:
            from PIL import Image

            data["image"] = [Image.fromarray(img) for img in prompt.images]
        request: dict[str, Any] = {"prompt_token_ids": list(prompt.input_ids)}
        if data:
            request["multi_modal_data"] = data
            request["mm_processor_kwargs"] = dict(MM_PROCESSOR_KWARGS)
        return request

    def _sampling_params(self, params: SamplingParams) -> Any:
        from vllm import SamplingParams as VllmSamplingParams

        return VllmSamplingParams(
            n=params.n,
            max_tokens=params.max_new_tokens,
            temperature=params.temperature,
            top_p=params.top_p,
            top_k=params.top_k if params.top_k > 0 else -1,
            seed=params.seed,
            stop_token_ids=list(self.adapter.eos_token_ids),
            stop=list(params.stop) or None,
            include_stop_str_in_output=True,  # the policy wrote it: it is trained on, like an eos
            logit_bias={t: SUPPRESS_BIAS for t in self.adapter.vision_token_ids},
            repetition_penalty=1.0,
            presence_penalty=params.presence_penalty,
            skip_special_tokens=True,
        )

    def _generations(self, output: Any) -> list[Generation]:
        return [
            Generation(
                token_ids=list(c.token_ids),
                text=self.adapter.decode(c.token_ids),
                finish_reason="stop" if c.finish_reason == "stop" else "length",
            )
            for c in output.outputs
        ]

    def generate(self, prompts: Sequence[PromptInputs], params: SamplingParams) -> list[list[Generation]]:
        if self.asynchronous:
            raise RuntimeError("VLLMEngine built with asynchronous=True: call `await engine.agenerate(...)`")
        outputs = self.llm.generate(
            [self._request(p) for p in prompts], self._sampling_params(params), use_tqdm=False
        )
        return [self._generations(o) for o in outputs]

    async def agenerate(self, prompts: Sequence[PromptInputs], params: SamplingParams) -> list[list[Generation]]:
        if not self.asynchronous:
            return await super().agenerate(prompts, params)
        import asyncio

        sampling = self._sampling_params(params)

        async def one(prompt: PromptInputs) -> list[Generation]:
            final = None
            async for out in self.llm.generate(self._request(prompt), sampling, request_id=uuid.uuid4().hex):
                final = out
            return self._generations(final)

        return list(await asyncio.gather(*(one(p) for p in prompts)))

    def update_weights(self, weights: Mapping[str, Any] | Iterable[tuple[str, Any]]) -> None:
        """Load new policy weights into every vLLM worker's model (via `LLM.apply_model`)."""
        items = list(weights.items() if isinstance(weights, Mapping) else weights)
        self.llm.apply_model(lambda model: model.load_weights(weights=items))
