"""Generation with transformers' `model.generate`: the CPU engine, and the GPU one when vLLM is absent.

The engine holds its own replica of the policy; `update_weights` copies the trained weights into it
in place. `encode_visual` runs the vision tower over prompts once and `generate(visual=...)` takes
such precomputed features instead of running it (transformers' `mm_encoder_outputs`): a colocated
rank with a frozen tower shares one encoding per prompt between its engine and its own passes.
The tower runs once per prompt, not once per sample: transformers encodes a chunk's media once before
expanding it to `n` return sequences, and the per-prompt-seeded path encodes each prompt once and
repeats its features over its `n` rows.

Per-prompt seeds (`SamplingParams.seeds`) are kept in batched calls: each row samples from a
generator of its own (`RowSeededSampler`, evr1/engines/row_sampler.py), so a chunk of `batch_size`
prompts is one `generate` with or without them.

With `SamplingParams.logprobs` each sampled token's log-prob comes back, under the raw logits at the
sampling temperature (`log_softmax(logits / T)`, no top-p / top-k filtering, no suppressed tokens;
greedy: T = 1), as the trainer computes its own: taken step by step from the model's output, so no
[steps, batch, vocabulary] logits are kept (`output_logits=True` would keep them all).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from os import PathLike

import evr1.models.lean_import  # noqa: F401,I001  (first: transformers then skips scikit-learn)
import torch
from transformers import GenerationConfig, LogitsProcessorList, PreTrainedModel, StoppingCriteria, StoppingCriteriaList

import evr1.models.packed  # noqa: F401  (the reference M-RoPE rule, as the trainer and vLLM use)
from evr1.engines.base import EngineBase, Generation, SamplingParams, cut_at_stop, finish
from evr1.engines.row_sampler import RowSeededSampler
from evr1.models.adapter import PromptInputs, VisionLanguageAdapter
from evr1.models.runtime import load_model
from evr1.models.shared_prefix import VisualFeatures, encode_visual, media_counts
from evr1.models.text import TextAdapter, load_any_adapter


def resolve_device(device: str | torch.device | None) -> torch.device:
    """`device` as a torch.device; None means cuda when available, else cpu."""
    if device is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


class HFEngine(EngineBase):
    """Batched, seeded `model.generate` over left-padded prompts with their media."""

    accepts_visual = True  # `generate(visual=...)`: precomputed vision features (see the module docstring)

    def __init__(self, model: PreTrainedModel, adapter: VisionLanguageAdapter | TextAdapter, *, batch_size: int = 8) -> None:
        if batch_size < 1:
            raise ValueError(f"HFEngine: field batch_size must be ≥ 1, got {batch_size}")
        self.model = model
        self.adapter = adapter
        self.batch_size = batch_size

    @classmethod
    def from_pretrained(
        cls,
        model_dir: str | PathLike,
        *,
        dtype: torch.dtype | str = torch.float32,
        attn_implementation: str = "sdpa",
        device: str | torch.device | None = None,
        batch_size: int = 8,
    ) -> HFEngine:
        """Load `model_dir` onto `device` ("cpu", "cuda", …; None: cuda when one is visible, else cpu).

        None is what a Ray rollout/eval actor gets: Ray hides GPUs from actors that asked for none,
        so the same call lands on the GPU it was given or on the CPU.
        """
        adapter = load_any_adapter(model_dir)
        if adapter.family is None:  # a text-only checkpoint (an LLM judge)
            from transformers import AutoModelForCausalLM

            from evr1.models.runtime import as_dtype

            model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=as_dtype(dtype),
                                                         attn_implementation=attn_implementation).eval()
        else:
            model = load_model(model_dir, dtype=dtype, attn_implementation=attn_implementation)
        model = model.to(resolve_device(device))
        return cls(model, adapter, batch_size=batch_size)

    @property
    def device(self) -> torch.device:
        return self.model.device

    @torch.no_grad()
    def update_weights(self, weights: Mapping[str, torch.Tensor] | Iterable[tuple[str, torch.Tensor]]) -> None:
        """Copy named tensors into the model's parameters/buffers in place (names as in `state_dict`)."""
        targets = dict(self.model.named_parameters(remove_duplicate=False))
        targets.update(dict(self.model.named_buffers(remove_duplicate=False)))
        items = weights.items() if isinstance(weights, Mapping) else weights
        for name, tensor in items:
            if name not in targets:
                raise KeyError(f"update_weights: the model has no parameter or buffer named {name!r}")
            if targets[name].shape != tensor.shape:
                raise ValueError(
                    f"update_weights: {name!r} has shape {tuple(targets[name].shape)}, got {tuple(tensor.shape)}"
                )
            targets[name].copy_(tensor)

    def _generation_config(self, params: SamplingParams, num_return: int, *, own_sampler: bool = False) -> GenerationConfig:
        """Every sampling knob set explicitly, so a checkpoint's generation_config.json (Qwen ships
        top_k=1, repetition_penalty=1.05, …) cannot silently change RL rollouts. `own_sampler`: the
        filters and the draw are `RowSeededSampler`'s, after which transformers picks greedily."""
        # Greedy decoding ignores the sampling filters: leave them unset, or transformers warns about them.
        sample = not params.greedy and not own_sampler
        sampling = {"temperature": params.temperature, "top_p": params.top_p, "top_k": params.top_k} if sample else {}
        return GenerationConfig(
            max_new_tokens=params.max_new_tokens,
            min_new_tokens=0,
            do_sample=sample,
            typical_p=1.0,
            repetition_penalty=1.0,
            no_repeat_ngram_size=0,
            num_beams=1,
            num_return_sequences=num_return,
            suppress_tokens=list(self.adapter.vision_token_ids),
            eos_token_id=list(self.adapter.eos_token_ids),
            pad_token_id=self.adapter.pad_token_id,
            use_cache=True,
            stop_strings=list(params.stop) or None,
            **sampling,
        )

    @torch.no_grad()
    def encode_visual(self, prompts: Sequence[PromptInputs]) -> list[VisualFeatures | None]:
        """Each prompt's vision features (None for a text-only prompt), the tower run once over the
        media of all of them together, as `generate` runs it over a chunk; in the model's dtype, on
        its device. What `generate(visual=...)` takes."""
        out: list[VisualFeatures | None] = [None] * len(prompts)
        media = [i for i, p in enumerate(prompts) if media_counts(p)]
        if not media:
            return out
        batch = self.adapter.collate([prompts[i] for i in media]).to(self.device, dtype=self.model.dtype)
        features = encode_visual(self.model, batch)
        for i, part in zip(media, features.split([media_counts(prompts[i]) for i in media])):
            out[i] = part
        return out

    def generate(self, prompts: Sequence[PromptInputs], params: SamplingParams, *,
                 visual: Sequence[VisualFeatures | None] | None = None) -> list[list[Generation]]:
        """`params.n` generations per prompt, in prompt order. A fixed `params.seed` reproduces a call
        (chunk k of `batch_size` prompts is seeded with seed + k); `params.seeds` makes each prompt's
        samples its own, whatever call, batch size or engine it lands in (one `generate` per prompt).

        `visual`: per prompt, its vision features (`encode_visual`, on any device, in the model's
        dtype) used instead of running the tower; None for a text-only prompt, or for one the
        engine should encode itself (in its chunk, as without `visual`)."""
        if params.presence_penalty:
            raise ValueError(f"HFEngine: field presence_penalty={params.presence_penalty} has no transformers "
                             "equivalent; use the vllm engine for it, or set it to 0")
        if visual is not None and len(visual) != len(prompts):
            raise ValueError(f"HFEngine: {len(visual)} visual features for a call of {len(prompts)} prompts")
        seeds = params.prompt_seeds(len(prompts))
        # Per-prompt seeds: each of a prompt's n samples is a row of its own with a generator of its
        # own (seeds[i] + j, vLLM's rule), so the chunk stays one batched call. Greedy needs no seed.
        per_row = seeds is not None and not params.greedy
        # Greedy decoding is deterministic: decode once and repeat (HF refuses n > 1 without sampling).
        num_return = 1 if params.greedy or per_row else params.n
        rows_per_prompt = params.n if per_row else num_return
        config = self._generation_config(params, num_return, own_sampler=per_row)
        calls = [(list(range(start, min(start + self.batch_size, len(prompts)))),
                  None if params.seed is None or per_row else params.seed + k)
                 for k, start in enumerate(range(0, len(prompts), self.batch_size))]
        # Log-probs at the sampling temperature (the trainer's); greedy samples the T → 0 limit: T = 1.
        extra: dict = {}
        if params.logprobs:
            extra["logprob_temperature"] = 1.0 if params.greedy else params.temperature
        results: list[list[Generation]] = []
        was_training = self.model.training
        self.model.eval()
        try:
            for positions, seed in calls:
                chunk = [prompts[i] for i in positions]
                if visual is not None:
                    extra["visual"] = [visual[i] for i in positions]
                call = self._rows_of(chunk, extra, params, [seeds[i] for i in positions]) if per_row else (chunk, extra)
                rows = self._generate_chunk(call[0], config, seed, **call[1])
                rows, logprobs = rows if isinstance(rows, tuple) else (rows, None)
                for i in range(len(positions)):
                    span = range(i * rows_per_prompt, (i + 1) * rows_per_prompt)
                    samples = [self._to_generation(rows[r], params, logprobs[r] if logprobs else None) for r in span]
                    if params.greedy:  # independent copies: callers may annotate each sample
                        samples = [Generation(list(g.token_ids), g.text, g.finish_reason,
                                              None if g.logprobs is None else list(g.logprobs))
                                   for g in samples * params.n]
                    results.append(samples)
        finally:
            self.model.train(was_training)
        return results

    def _rows_of(self, chunk: list[PromptInputs], extra: dict, params: SamplingParams,
                 seeds: Sequence[int]) -> tuple[list[PromptInputs], dict]:
        """The chunk as one row per sample (each prompt `n` times, its features encoded once and
        repeated), and `extra` with the sampler that draws row (i, j) from seed seeds[i] + j."""
        n = params.n
        features = self._filled(chunk, extra.get("visual") or [None] * len(chunk))
        sampler = RowSeededSampler([s + j for s in seeds for j in range(n)], temperature=params.temperature,
                                   top_k=params.top_k, top_p=params.top_p)
        rows_extra = {**extra, "sampler": sampler}
        if any(v is not None for v in features):  # text-only chunks (and text models) take no features
            rows_extra["visual"] = [v for v in features for _ in range(n)]
        return [p for p in chunk for _ in range(n)], rows_extra

    def _generate_chunk(self, chunk: Sequence[PromptInputs], config: GenerationConfig, seed: int | None, *,
                        visual: Sequence[VisualFeatures | None] | None = None,
                        logprob_temperature: float | None = None, sampler: RowSeededSampler | None = None):
        """The chunk's raw continuations [B·n][steps] and, with `logprob_temperature`, each sampled
        token's log-prob under the raw logits / that temperature (a (rows, logprobs) pair then).
        `sampler`: a row-seeded draw (config then decodes greedily over its scores)."""
        batch = self.adapter.collate(chunk)
        if visual is not None:
            batch = batch.with_visual(self._chunk_features(chunk, visual))
        batch = batch.to(self.device, dtype=self.model.dtype)
        cuda = [self.device.index or 0] if self.device.type == "cuda" else []
        record = _SampledLogProbs(self.model, logprob_temperature) if logprob_temperature is not None else None
        try:
            with torch.random.fork_rng(devices=cuda, enabled=seed is not None):
                if seed is not None:
                    torch.manual_seed(seed)
                # stop_strings need the tokenizer to find which tokens can complete them
                extra = {"tokenizer": self.adapter.tokenizer} if config.stop_strings else {}
                if record is not None:
                    extra["stopping_criteria"] = StoppingCriteriaList([record])
                if sampler is not None:
                    extra["logits_processor"] = LogitsProcessorList([sampler])
                out = self.model.generate(**batch.model_inputs(), generation_config=config, **extra)
        finally:
            if record is not None:
                record.remove()
        rows = out[:, batch.prompt_length :].tolist()
        if record is None:
            return rows
        return rows, record.rows(len(rows))

    def _filled(self, chunk: Sequence[PromptInputs], visual: Sequence[VisualFeatures | None]) -> list[VisualFeatures | None]:
        """Per prompt, the features given, or those of a prompt with media that has none encoded here
        (one tower call for all of them); None for a text-only prompt."""
        missing = [i for i, (p, v) in enumerate(zip(chunk, visual)) if v is None and media_counts(p)]
        parts = list(visual)
        for i, part in zip(missing, self.encode_visual([chunk[i] for i in missing]) if missing else ()):
            parts[i] = part
        return parts

    def _chunk_features(self, chunk: Sequence[PromptInputs], visual: Sequence[VisualFeatures | None]) -> VisualFeatures:
        """The chunk's features in batch order: those given, the missing ones of prompts with media
        encoded here in one tower call. A fresh object: transformers expands it to n in place."""
        parts = self._filled(chunk, visual)
        for p, v in zip(chunk, parts):
            if v is not None and v.dtype is not None and v.dtype != self.model.dtype:
                raise ValueError(f"HFEngine: visual features in {v.dtype} for a model in {self.model.dtype}")
            if v is not None and len(v) != sum(media_counts(p).values()):
                raise ValueError(f"HFEngine: visual features for {len(v)} media, the prompt holds "
                                 f"{sum(media_counts(p).values())}")
        return VisualFeatures.concat([v for v in parts if v is not None])

    def _to_generation(self, row: list[int], params: SamplingParams, logprobs: list[float] | None = None) -> Generation:
        ids, reason = finish(row, self.adapter.eos_token_ids, params.max_new_tokens)
        stopped = cut_at_stop(ids, self.adapter.decode, params.stop) if params.stop else None
        if stopped is not None:  # transformers pads a row after its stop string: cut it there
            ids, reason = stopped, "stop"
        return Generation(token_ids=ids, text=self.adapter.decode(ids), finish_reason=reason,
                          logprobs=None if logprobs is None else logprobs[: len(ids)])


class _SampledLogProbs(StoppingCriteria):
    """Each sampled token's log-prob, step by step, without keeping the logits: a forward hook holds
    the model's last raw logits [B, V]; transformers calls the stopping criteria right after each
    token is sampled, with it appended to `input_ids`, and this one (which never stops anything)
    takes its log_softmax(logits / T) there and lets the logits go. Steps transformers generates past
    the end and undoes come last: `rows` is cut to each row's length by the caller."""

    def __init__(self, model: torch.nn.Module, temperature: float):
        if temperature <= 0:
            raise ValueError(f"log-probs need a temperature > 0, got {temperature}")
        self.temperature = temperature
        self.logits: torch.Tensor | None = None
        self.steps: list[torch.Tensor] = []
        self._handle = model.register_forward_hook(self._hook)

    def _hook(self, module, args, output) -> None:
        logits = getattr(output, "logits", None)
        if logits is not None:
            self.logits = logits[:, -1]

    def __call__(self, input_ids: torch.Tensor, scores, **kwargs) -> torch.Tensor:
        if self.logits is None:
            raise RuntimeError("HFEngine: no logits from the model's forward before a sampled token")
        z = self.logits.float()
        if self.temperature != 1.0:
            z = z / self.temperature
        token = input_ids[:, -1:].to(z.device)
        self.steps.append(z.gather(-1, token).squeeze(-1) - torch.logsumexp(z, dim=-1))  # [B], on the device
        self.logits = None
        return torch.zeros(input_ids.shape[0], dtype=torch.bool, device=input_ids.device)

    def remove(self) -> None:
        self._handle.remove()

    def rows(self, batch: int) -> list[list[float]]:
        if not self.steps:
            return [[] for _ in range(batch)]
        return torch.stack(self.steps, dim=1).tolist()
