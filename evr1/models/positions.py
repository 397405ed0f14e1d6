"""Multimodal rope positions worked out on the host, before a batch goes to the device (issue 33, item 11).

Qwen-VL models place each token on three rope axes (time, height, width) with `get_rope_index`, a
Python loop over every row and every image or video grid. Run inside the forward on an accelerator,
each `.tolist()`/`.item()`/boolean index in it makes the host wait until the device has run all the
work queued so far (the counts are in docs/performance.md). Its inputs (token ids, the attention
mask, the grids) are host tensors before the batch is moved, so the same function run there costs
no wait; the positions then travel with the batch, and the forward, given `position_ids`, skips it.

The values are the model's own: the same `get_rope_index` (evr1's reference-rule version for
Qwen2-VL / Qwen2.5-VL, `evr1.models.packed`), only on other tensors. A batch without grids keeps
`position_ids` None, as the model itself does there (its text positions are then `arange`).
"""

from __future__ import annotations

from dataclasses import replace

import torch
from transformers import PreTrainedModel

from evr1.models.batch import ModelBatch

ROPE_KEYS = ("image_grid_thw", "video_grid_thw", "second_per_grid_ts")


def rope_index_of(model: PreTrainedModel):
    """The model's `get_rope_index` (Qwen-VL families keep it on `model.model`), or None."""
    inner = getattr(model, "model", None)
    return getattr(inner, "get_rope_index", None)


def with_host_positions(model: PreTrainedModel, batch: ModelBatch) -> ModelBatch:
    """`batch` (on the host) with `position_ids` [3, B, L] and `rope_deltas` [B, 1] computed there by the
    model's own `get_rope_index`; unchanged when it has no grids, no such method, or already has them."""
    grids = {k: batch.mm[k] for k in ROPE_KEYS if k in batch.mm}
    rope_index = rope_index_of(model)
    if batch.position_ids is not None or not grids or rope_index is None:
        return batch
    if batch.input_ids.device.type != "cpu":
        raise ValueError("with_host_positions: the batch is already on the device; call it before ModelBatch.to")
    with torch.no_grad():
        positions, deltas = rope_index(input_ids=batch.input_ids, mm_token_type_ids=batch.mm_token_type_ids,
                                       attention_mask=batch.attention_mask, **grids)
    return replace(batch, position_ids=positions, rope_deltas=deltas.reshape(-1, 1))
