"""Padding-free passes: a micro-batch's sequences packed end to end into one row, no pad tokens.

A padded micro-batch of video prompts wastes compute in proportion to the spread of lengths: a
1,000-token prompt padded to a 20,000-token neighbour costs twenty times its own work. Here the
valid tokens of every row are laid end to end as one sequence of T = Σ nᵢ tokens, and each keeps
its own positions:

- the multimodal rope positions come from the model's own `get_rope_index` over the padded batch
  (so they are exactly the padded path's, per sequence), and the text positions restart at 0 for
  each sequence;
- given 4-row `position_ids` ([text; t; h; w]) and no attention mask, transformers finds the
  sequence boundaries where the text position does not step by one: flash-attention varlen kernels
  get `cu_seqlens` from them (GPU, no mask at all), and sdpa/eager get a block-diagonal causal mask
  (the CPU equivalent; its log-probs equal the padded path's to float rounding);
- only the positions that predict response tokens get logits (`logits_to_keep` as indices).

Qwen3.5's gated-delta-net layers carry a causal convolution and a recurrent state across the whole
row, which transformers' torch kernels do not reset at sequence boundaries: that family stays on
the padded path (`supports_packing`).

One position rule for rollout and training (`use_reference_position_rule`, applied on import):
transformers 5.19's Qwen2-VL / Qwen2.5-VL `get_rope_index` starts the text after an image or video at
`start + max(h, w)`; Qwen's reference code, and vLLM 0.32 (the rollout engine), at
`max(vision positions) + 1`. The two differ whenever a video's temporal extent (Qwen2.5-VL: its last
temporal position, `(groups − 1) · tokens_per_second · seconds_per_group`; Qwen2-VL: its group count)
exceeds its spatial one, the usual case for real videos, so rollout and training would score different
sequences. The released checkpoints were trained with the reference rule, so the trainer side is
aligned to it: both families' `get_rope_index` are replaced by one that differs from transformers'
only in that start position (vision positions are transformers' own `get_vision_position_ids`).
Every transformers path in a process that imported this module uses it: the padded and packed
log-probs, `generate` (HF engine) and `shared_prefix`. Qwen3-VL is untouched: each of its frame
groups is its own vision block with one temporal position, where the two rules agree.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, replace
from typing import Any

import torch
from transformers import PreTrainedModel

from evr1.models.adapter import ModelBatch
from evr1.models.batch import to_device
from evr1.models.positions import ROPE_KEYS, with_host_positions
from evr1.models.runtime import (
    check_temperature,
    chunked_token_log_probs,
    hidden_instead_of_logits,
    token_log_probs,
    valid_index,
)

# Families whose every layer is attention (masking by sequence boundary is exact).
PACKABLE = frozenset({"qwen2_vl", "qwen2_5_vl", "qwen3_vl"})


def supports_packing(family: str) -> bool:
    """Whether `packed_response_log_probs` is exact for this model family."""
    return family in PACKABLE


@dataclass(frozen=True)
class PackedLayout:
    """Where a padded micro-batch's valid tokens go in its packed row: the row's ids, token types and
    4-row positions ([text; t; h; w], each [.., 1, T]) and `keep` [B, Lr], the packed position predicting
    each response token (0 past a response's end). Index tensors only: made on the host before the
    batch moves (`packed_layout` of a host batch), they cost the device no wait."""

    input_ids: torch.Tensor
    mm_token_type_ids: torch.Tensor
    position_ids: torch.Tensor
    keep: torch.Tensor

    def to(self, device: torch.device | str, *, non_blocking: bool = False) -> PackedLayout:
        return PackedLayout(*(to_device(t, device, non_blocking=non_blocking) for t in
                              (self.input_ids, self.mm_token_type_ids, self.position_ids, self.keep)))


def packed_layout(model: PreTrainedModel, batch: ModelBatch) -> PackedLayout:
    """The packed row of `batch`, computed on the batch's device (the host, before it moves, in the
    trainer). Its rope positions are `batch.position_ids` when the host worked them out already
    (`positions.with_host_positions`), else the model's `get_rope_index` over the padded batch."""
    valid = batch.attention_mask.bool()
    b, width = valid.shape
    if batch.position_ids is not None:
        rope = batch.position_ids
    else:
        grids = {k: batch.mm[k] for k in ROPE_KEYS if k in batch.mm}
        rope, _ = model.model.get_rope_index(input_ids=batch.input_ids, mm_token_type_ids=batch.mm_token_type_ids,
                                             attention_mask=batch.attention_mask, **grids)
    text = valid.long().cumsum(1) - 1  # 0 at each sequence's first token
    position_ids = torch.cat([text[valid][None], rope[:, valid]])[:, None, :]  # [4, 1, T]
    flat = (valid.flatten().long().cumsum(0) - 1).view(b, width)  # packed index of each padded cell
    lr = batch.response_mask.shape[1]
    predictor = flat[:, batch.prompt_length - 1: batch.prompt_length - 1 + lr]  # position t predicts t + 1
    ends = batch.prompt_length - 1 + torch.arange(lr, device=valid.device)
    keep = torch.where(valid.gather(1, ends.expand(b, lr)), predictor, torch.zeros_like(predictor))
    return PackedLayout(batch.input_ids[valid][None], batch.mm_token_type_ids[valid][None], position_ids, keep)


def host_prepared(model: PreTrainedModel, batch: ModelBatch, *, packed: bool) -> ModelBatch:
    """`batch`, still on the host, with its rope positions (`positions.with_host_positions`), its valid
    response positions (`response_index`, for the chunked log-probs) and, for the packed pass, its packed
    layout worked out there: the forward then runs none of `get_rope_index`'s loops nor a `nonzero`,
    each of which would make the host wait for the device (issue 33)."""
    batch = replace(with_host_positions(model, batch), response_index=valid_index(batch.response_mask))
    return replace(batch, packed=packed_layout(model, batch)) if packed else batch


def packed_inputs(model: PreTrainedModel, batch: ModelBatch) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
    """(model inputs of the packed row, index [B, Lr] of the packed position predicting each response token).

    `batch` is on the model's device with its media prepared (or precomputed features:
    `ModelBatch.with_visual`); its layout is `batch.packed` when the host made it, else worked out
    here (`packed_layout`). Indices past a response's end point at position 0 (their log-probs are
    masked out, as on the padded path).
    """
    layout = batch.packed if batch.packed is not None else packed_layout(model, batch)
    media = {k: v for k, v in batch.model_inputs().items()
             if k not in ("input_ids", "attention_mask", "mm_token_type_ids", "position_ids")}
    inputs = {"input_ids": layout.input_ids, "mm_token_type_ids": layout.mm_token_type_ids,
              "position_ids": layout.position_ids, "attention_mask": None, **media}
    return inputs, layout.keep


def packed_response_log_probs(
    model: PreTrainedModel, batch: ModelBatch, *, temperature: float = 1.0, with_entropy: bool = False,
    chunk_tokens: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """`runtime.response_log_probs` without padding: [B, Lr] log-probs (and entropy) of the response
    tokens, 0 outside `response_mask`, from one forward over the packed row. `chunk_tokens`: the
    output head is applied that many valid response tokens at a time (`runtime.chunked_token_log_probs`:
    no [B·Lr, V] logits); None: full logits."""
    check_temperature(temperature)
    b, lr = batch.response_mask.shape
    if lr == 0:
        empty = batch.input_ids.new_zeros((b, 0), dtype=torch.float32)
        return empty, (empty.clone() if with_entropy else None)
    inputs, keep = packed_inputs(model, batch)
    if chunk_tokens is not None:
        with hidden_instead_of_logits(model) as head:
            hidden = model(**inputs, logits_to_keep=keep.flatten(), use_cache=False).logits  # [1, B·Lr, H]
        # The head's parameters are read after the forward: FSDP2 gathers the root unit (which holds the
        # head) during it and leaves it gathered until the backward is done.
        return chunked_token_log_probs(hidden.view(b, lr, -1), head.weight, batch.response_ids, batch.response_mask,
                                       temperature, with_entropy, bias=head.bias, chunk_tokens=chunk_tokens,
                                       index=batch.response_index)
    logits = model(**inputs, logits_to_keep=keep.flatten(), use_cache=False).logits  # [1, B·Lr, V]
    return token_log_probs(logits.view(b, lr, -1), batch.response_ids, batch.response_mask, temperature, with_entropy)


def padding_share(lengths: list[int]) -> float:
    """The share of a padded [B, max(len)] batch that is padding (0 for a packed one)."""
    if not lengths:
        return 0.0
    return 1.0 - sum(lengths) / (len(lengths) * max(lengths))


def _reference_rope_index(scaled_time: bool):
    """`get_rope_index` for Qwen2-VL (`scaled_time=False`) or Qwen2.5-VL (True) with the reference rule:
    text after a vision block starts at max(its positions) + 1. Same signature and outputs as
    transformers 5.19's otherwise."""

    def get_rope_index(
        self: Any,
        input_ids: torch.LongTensor,
        mm_token_type_ids: torch.IntTensor,
        *,
        image_grid_thw: torch.LongTensor | None = None,
        video_grid_thw: torch.LongTensor | None = None,
        second_per_grid_ts: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        **kwargs: Any,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        merge = self.config.vision_config.spatial_merge_size
        tokens_per_second = getattr(self.config.vision_config, "tokens_per_second", 1)
        position_ids = torch.zeros(3, *input_ids.shape, dtype=input_ids.dtype, device=input_ids.device)
        grids = {1: iter(image_grid_thw) if image_grid_thw is not None else None,
                 2: iter(video_grid_thw) if video_grid_thw is not None else None}
        seconds = iter(second_per_grid_ts) if second_per_grid_ts is not None else itertools.repeat(1)
        deltas = []
        for b, ids in enumerate(input_ids):
            types = mm_token_type_ids[b]
            if attention_mask is not None:
                keep = attention_mask[b].bool()
                ids, types = ids[keep], types[keep]
            parts, pos = [], 0
            for kind, group in itertools.groupby(types.tolist()):
                n = len(list(group))
                if kind == 0:
                    parts.append(torch.arange(n, device=input_ids.device).view(1, -1).expand(3, -1) + pos)
                    pos += n
                    continue
                grid = next(grids[kind])
                interval = tokens_per_second * next(seconds) if (scaled_time and kind == 2) else 1
                vision = self.get_vision_position_ids(pos, grid, 1, merge, interval, device=input_ids.device)
                parts.append(vision)
                pos = int(vision.max()) + 1  # transformers 5.19: pos += max(h, w) // merge
            positions = torch.cat(parts, dim=1).reshape(3, -1)
            if attention_mask is not None:
                position_ids[:, b, attention_mask[b].bool()] = positions.to(position_ids.device)
            else:
                position_ids[:, b] = positions.to(position_ids.device)
            deltas.append(positions.max() + 1 - len(ids))
        return position_ids, torch.tensor(deltas, device=input_ids.device).unsqueeze(1)

    get_rope_index.evr1_reference_rule = True  # type: ignore[attr-defined]
    return get_rope_index


def use_reference_position_rule() -> list[str]:
    """Give transformers' Qwen2-VL and Qwen2.5-VL models the reference (and vLLM's) M-RoPE start rule
    for text after vision (module docstring). Idempotent; returns the classes it patched this call."""
    from transformers.models.qwen2_5_vl import modeling_qwen2_5_vl
    from transformers.models.qwen2_vl import modeling_qwen2_vl

    patched = []
    for cls, scaled in ((modeling_qwen2_vl.Qwen2VLModel, False), (modeling_qwen2_5_vl.Qwen2_5_VLModel, True)):
        if getattr(cls.get_rope_index, "evr1_reference_rule", False):
            continue
        if not hasattr(cls, "get_vision_position_ids"):
            raise RuntimeError(f"{cls.__name__}: no get_vision_position_ids (transformers changed; see evr1/models/packed.py)")
        cls.evr1_transformers_get_rope_index = cls.get_rope_index
        cls.get_rope_index = _reference_rope_index(scaled)
        patched.append(cls.__name__)
    return patched


use_reference_position_rule()
