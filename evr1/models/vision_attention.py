"""The vision tower's attention windows in one call, instead of one `sdpa` call per window.

Qwen2-VL, Qwen2.5-VL, Qwen3-VL and Qwen3.5's vision towers attend within windows: each temporal group of patches
(the full-attention blocks) or, in Qwen2.5-VL's window blocks, each 112 × 112-pixel window, given as
`cu_seqlens`. Under `sdpa`, transformers 5.19 splits q, k and v by those lengths (`lengths.tolist()`:
the host waits for the device, in every block) and runs one attention call per window. For a 64-frame
384×672 video (364×672 after resizing) that is 768 windows in each of the 28 window blocks and 32 in each of
the 4 full ones, about 21,600 calls per forward pass, and as many again for gradient checkpointing's
recompute and the backward: measured on an H200, the tower then dominates the update (docs/performance.md,
"On a GPU").

transformers hands a flash-style implementation `cu_seqlens` and the longest window instead, in one
call. `VARLEN_SDPA` is such an implementation built on `torch.nn.functional.scaled_dot_product_attention`
(nothing beyond torch: CPU and GPU): rows are copied into a [windows, heads, longest, head_dim]
batch, shorter windows padded and their padding masked out of the keys, one attention call, and the rows
gathered back. When every window has the same length (the sequence length is the window count times
the longest) no padding, no mask and no copy are needed. No step waits for the device: the window count
is the shape of `cu_seqlens`, and the longest window is the one host value transformers computes once
per forward for the flash path.

`use_varlen_vision_attention(model)` switches a loaded model's vision tower to it when the model runs
`sdpa` (the registered name contains "flash" because that is how transformers' vision attention
chooses the `cu_seqlens` call; no flash-attn kernel is involved). tests/models/test_vision_attention.py
checks the tower's output and gradients against the per-window path for the four families.
"""

from __future__ import annotations

import copy

import torch
import torch.nn.functional as F
from transformers import AttentionInterface, PreTrainedModel

VARLEN_SDPA = "evr1_varlen_sdpa_flash_api"


def varlen_sdpa(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                attention_mask: torch.Tensor | None = None, *, scaling: float | None = None, dropout: float = 0.0,
                cu_seq_lens_q: torch.Tensor | None = None, max_length_q: int | None = None,
                is_causal: bool = False, **_: object) -> tuple[torch.Tensor, None]:
    """Attention within each window of `cu_seq_lens_q` over q, k, v of shape [1, heads, S, head_dim];
    returns [1, S, heads, head_dim] (the flash interface's layout) and no weights."""
    if cu_seq_lens_q is None or is_causal or attention_mask is not None:
        raise ValueError(f"{VARLEN_SDPA}: only the vision tower's non-causal windows (cu_seq_lens_q) are supported")
    _, heads, seq, dim = query.shape
    windows = cu_seq_lens_q.shape[0] - 1
    longest = int(max_length_q) if max_length_q is not None else int((cu_seq_lens_q[1:] - cu_seq_lens_q[:-1]).max())
    if windows * longest == seq:  # every window equally long: a reshape, no mask (flash kernels stay eligible)
        q, k, v = (t[0].reshape(heads, windows, longest, dim).transpose(0, 1) for t in (query, key, value))
        out = F.scaled_dot_product_attention(q, k, v, dropout_p=dropout, scale=scaling)  # [w, h, L, d]
        return out.permute(0, 2, 1, 3).reshape(1, seq, heads, dim), None
    # Each row's slot in the padded [windows · longest] layout: its window times `longest` plus its offset
    # in the window. Rows move by index_copy (scatter to distinct slots) and come back by index_select:
    # their backward passes are a gather and a scatter-add, not advanced indexing's sort-based accumulate.
    cu = cu_seq_lens_q.long()
    lengths = cu[1:] - cu[:-1]
    window = torch.repeat_interleave(torch.arange(windows, device=query.device), lengths, output_size=seq)
    slot = window * longest + torch.arange(seq, device=query.device) - cu[window]
    valid = torch.arange(longest, device=query.device)[None, :] < lengths[:, None]  # [w, L]
    q, k, v = (t[0].new_zeros(heads, windows * longest, dim).index_copy(1, slot, t[0])
               .view(heads, windows, longest, dim).transpose(0, 1) for t in (query, key, value))  # [w, h, L, d]
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=valid[:, None, None, :], dropout_p=dropout, scale=scaling)
    flat = out.permute(0, 2, 1, 3).reshape(windows * longest, heads, dim)
    return flat.index_select(0, slot).unsqueeze(0), None


AttentionInterface.register(VARLEN_SDPA, varlen_sdpa)


def use_varlen_vision_attention(model: PreTrainedModel) -> bool:
    """Switch `model`'s vision tower from per-window `sdpa` calls to `varlen_sdpa`; True when switched
    (the model runs sdpa and has a vision tower with a config).

    The tower and its modules get a copy of the vision config naming the implementation; the model's own
    config keeps "sdpa", so what is saved, and any model built from it elsewhere (vLLM, a merge, a meta-device
    copy), never meets a name that only this process has registered."""
    inner = getattr(model, "model", model)
    visual = getattr(inner, "visual", None)
    config = getattr(visual, "config", None)
    if config is None or getattr(config, "_attn_implementation", None) != "sdpa":
        return False
    own = copy.copy(config)
    own._attn_implementation = VARLEN_SDPA
    for module in visual.modules():
        if getattr(module, "config", None) is config:
            module.config = own
    return True
