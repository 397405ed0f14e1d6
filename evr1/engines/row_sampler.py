"""Sampling with a seed per row inside one batched `model.generate`: the HF engine's per-prompt seeds.

transformers samples a whole batch from torch's one global generator, so a row's samples depend on
its neighbours and on how many rows came before it. To give each of a prompt's samples its own seed
(`SamplingParams.seeds`, as vLLM gives each request a generator) the HF engine used to generate one
prompt per call, about three times slower than batches of 8 prompts on the CPU
(`benchmarks/bench_seeding.py`).

`RowSeededSampler` samples every row from a generator of its own instead, in one batched call. It
is a logits processor run with `do_sample=False`: it applies the sampling filters (temperature,
top-k, top-p, with transformers' own rules, in its order) and adds Gumbel noise drawn from the
row's generator, so the greedy pick that follows is a draw from the filtered softmax (the Gumbel-max
rule: argmax(z + G), G = −log E, E ~ Exp(1), is distributed as softmax(z)). Every row draws one noise
vector per step, finished rows too, so row r's k-th token always uses the k-th draw of its own
stream: what it samples depends on its prompt, its seed and the model, not on the other rows. The
logits of a row in a left-padded batch differ from those of the prompt alone by float rounding
only, which moves a sample only where two perturbed scores tie to that rounding.
"""

from __future__ import annotations

from collections.abc import Sequence

import evr1.models.lean_import  # noqa: F401,I001  (first: transformers then skips scikit-learn)
import torch
from transformers import LogitsProcessor


class RowSeededSampler(LogitsProcessor):
    """Scores whose argmax is a sample from each row's filtered softmax, row r's noise from `seeds[r]`.

    `temperature` > 0; `top_k` ≤ 0: no top-k; `top_p` 1: no nucleus filter (SamplingParams' meaning)."""

    def __init__(self, seeds: Sequence[int], *, temperature: float, top_k: int = 0, top_p: float = 1.0) -> None:
        if temperature <= 0:
            raise ValueError(f"RowSeededSampler: temperature must be > 0 (greedy needs no seeds), got {temperature}")
        if not 0.0 < top_p <= 1.0:
            raise ValueError(f"RowSeededSampler: top_p must be in (0, 1], got {top_p}")
        self.seeds = [int(s) for s in seeds]
        self.temperature = temperature
        self.top_k = top_k
        self.top_p = top_p
        self._generators: list[torch.Generator] | None = None

    def filtered(self, scores: torch.Tensor) -> torch.Tensor:
        """`scores` [rows, V] / temperature, with what top-k and top-p drop set to −inf: the logits whose
        softmax is the sampling distribution (transformers' TemperatureLogitsWarper, TopKLogitsWarper,
        TopPLogitsWarper, in that order and with their tie and keep-one rules)."""
        z = scores.float()
        if self.temperature != 1.0:
            z = z / self.temperature
        if 0 < self.top_k < z.shape[-1]:
            kth = torch.topk(z, self.top_k, dim=-1).values[..., -1:]
            z = z.masked_fill(z < kth, float("-inf"))
        if self.top_p < 1.0:
            ascending, order = torch.sort(z, dim=-1)
            drop = ascending.softmax(dim=-1).cumsum(dim=-1) <= 1.0 - self.top_p
            drop[..., -1:] = False  # the likeliest token always stays
            z = z.masked_fill(drop.scatter(-1, order, drop), float("-inf"))
        return z

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        if scores.shape[0] != len(self.seeds):
            raise ValueError(f"RowSeededSampler: {scores.shape[0]} rows for {len(self.seeds)} seeds")
        if self._generators is None:  # on the scores' device, made at the first step
            self._generators = [torch.Generator(device=scores.device).manual_seed(s) for s in self.seeds]
        vocab = scores.shape[-1]
        exp = torch.stack([torch.empty(vocab, device=scores.device).exponential_(generator=g)
                           for g in self._generators])
        return self.filtered(scores) - exp.log()
