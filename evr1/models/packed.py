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
"""

from __future__ import annotations

import torch
from transformers import PreTrainedModel

from evr1.models.adapter import ModelBatch
from evr1.models.runtime import check_temperature, token_log_probs

# Families whose every layer is attention (masking by sequence boundary is exact).
PACKABLE = frozenset({"qwen2_vl", "qwen2_5_vl", "qwen3_vl"})
ROPE_KEYS = ("image_grid_thw", "video_grid_thw", "second_per_grid_ts")


def supports_packing(family: str) -> bool:
    """Whether `packed_response_log_probs` is exact for this model family."""
    return family in PACKABLE


def packed_inputs(model: PreTrainedModel, batch: ModelBatch) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
    """(model inputs of the packed row, index [B, Lr] of the packed position predicting each response token).

    `batch` is on the model's device with its media prepared (or precomputed features:
    `ModelBatch.with_visual`). Indices past a response's end point
    at position 0 (their log-probs are masked out, as on the padded path).
    """
    valid = batch.attention_mask.bool()
    b, width = valid.shape
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
    media = {k: v for k, v in batch.model_inputs().items() if k not in ("input_ids", "attention_mask", "mm_token_type_ids")}
    inputs = {"input_ids": batch.input_ids[valid][None], "mm_token_type_ids": batch.mm_token_type_ids[valid][None],
              "position_ids": position_ids, "attention_mask": None, **media}
    return inputs, keep


def packed_response_log_probs(
    model: PreTrainedModel, batch: ModelBatch, *, temperature: float = 1.0, with_entropy: bool = False
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """`runtime.response_log_probs` without padding: [B, Lr] log-probs (and entropy) of the response
    tokens, 0 outside `response_mask`, from one forward over the packed row."""
    check_temperature(temperature)
    b, lr = batch.response_mask.shape
    if lr == 0:
        empty = batch.input_ids.new_zeros((b, 0), dtype=torch.float32)
        return empty, (empty.clone() if with_entropy else None)
    inputs, keep = packed_inputs(model, batch)
    logits = model(**inputs, logits_to_keep=keep.flatten(), use_cache=False).logits  # [1, B·Lr, V]
    return token_log_probs(logits.view(b, lr, -1), batch.response_ids, batch.response_mask, temperature, with_entropy)


def padding_share(lengths: list[int]) -> float:
    """The share of a padded [B, max(len)] batch that is padding (0 for a packed one)."""
    if not lengths:
        return 0.0
    return 1.0 - sum(lengths) / (len(lengths) * max(lengths))
