"""Generation with transformers' `model.generate`: the CPU engine, and the GPU one when vLLM is absent.

In training `engine.model` IS the policy being optimised (no copy), so rollouts always use the
current weights; `update_weights` copies a state dict into it in place for the case where the
engine holds its own replica (e.g. a separate rollout worker).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from os import PathLike

import torch
from transformers import GenerationConfig, PreTrainedModel

import evr1.models.packed  # noqa: F401  (the reference M-RoPE rule, as the trainer and vLLM use)
from evr1.engines.base import EngineBase, Generation, SamplingParams, cut_at_stop, finish
from evr1.models.adapter import PromptInputs, VisionLanguageAdapter
from evr1.models.runtime import load_model
from evr1.models.text import TextAdapter, load_any_adapter


def resolve_device(device: str | torch.device | None) -> torch.device:
    """`device` as a torch.device; None means cuda when available, else cpu."""
    if device is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


class HFEngine(EngineBase):
    """Batched, seeded `model.generate` over left-padded prompts with their media."""

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

    def _generation_config(self, params: SamplingParams, num_return: int) -> GenerationConfig:
        """Every sampling knob set explicitly, so a checkpoint's generation_config.json (Qwen ships
        top_k=1, repetition_penalty=1.05, …) cannot silently change RL rollouts."""
        # Greedy decoding ignores the sampling filters: leave them unset, or transformers warns about them.
        sampling = {} if params.greedy else {"temperature": params.temperature, "top_p": params.top_p,
                                             "top_k": params.top_k}
        return GenerationConfig(
            max_new_tokens=params.max_new_tokens,
            min_new_tokens=0,
            do_sample=not params.greedy,
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

    def generate(self, prompts: Sequence[PromptInputs], params: SamplingParams) -> list[list[Generation]]:
        """`params.n` generations per prompt, in prompt order. A fixed `params.seed` reproduces a call
        (chunk k of `batch_size` prompts is seeded with seed + k); `params.seeds` makes each prompt's
        samples its own, whatever call, batch size or engine it lands in (one `generate` per prompt)."""
        if params.presence_penalty:
            raise ValueError(f"HFEngine: field presence_penalty={params.presence_penalty} has no transformers "
                             "equivalent; use the vllm engine for it, or set it to 0")
        seeds = params.prompt_seeds(len(prompts))
        # Greedy decoding is deterministic: decode once and repeat (HF refuses n > 1 without sampling).
        num_return = 1 if params.greedy else params.n
        config = self._generation_config(params, num_return)
        # Per-prompt seeds: each prompt alone (no padding, no neighbours drawing from its RNG), its n
        # samples one batch of n return sequences. Greedy needs no seed: it stays batched.
        if seeds is not None and not params.greedy:
            calls = [([p], s) for p, s in zip(prompts, seeds)]
        else:
            calls = [(prompts[start : start + self.batch_size], None if params.seed is None else params.seed + k)
                     for k, start in enumerate(range(0, len(prompts), self.batch_size))]
        results: list[list[Generation]] = []
        was_training = self.model.training
        self.model.eval()
        try:
            for chunk, seed in calls:
                rows = self._generate_chunk(chunk, config, seed)
                for i in range(len(chunk)):
                    samples = [self._to_generation(r, params) for r in rows[i * num_return : (i + 1) * num_return]]
                    if params.greedy:  # independent copies: callers may annotate each sample
                        samples = [Generation(list(g.token_ids), g.text, g.finish_reason) for g in samples * params.n]
                    results.append(samples)
        finally:
            self.model.train(was_training)
        return results

    def _generate_chunk(self, chunk: Sequence[PromptInputs], config: GenerationConfig, seed: int | None) -> list[list[int]]:
        batch = self.adapter.collate(chunk).to(self.device, dtype=self.model.dtype)
        cuda = [self.device.index or 0] if self.device.type == "cuda" else []
        with torch.random.fork_rng(devices=cuda, enabled=seed is not None):
            if seed is not None:
                torch.manual_seed(seed)
            # stop_strings need the tokenizer to find which tokens can complete them
            extra = {"tokenizer": self.adapter.tokenizer} if config.stop_strings else {}
            out = self.model.generate(**batch.model_inputs(), generation_config=config, **extra)
        return out[:, batch.prompt_length :].tolist()

    def _to_generation(self, row: list[int], params: SamplingParams) -> Generation:
        ids, reason = finish(row, self.adapter.eos_token_ids, params.max_new_tokens)
        stopped = cut_at_stop(ids, self.adapter.decode, params.stop) if params.stop else None
        if stopped is not None:  # transformers pads a row after its stop string: cut it there
            ids, reason = stopped, "stop"
        return Generation(token_ids=ids, text=self.adapter.decode(ids), finish_reason=reason)
