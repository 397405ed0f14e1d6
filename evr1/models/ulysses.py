"""Ulysses attention: a decoder whose tokens are split over k ranks attends over the whole sequence.

Each rank of a sequence-parallel group holds a contiguous slice of Lc = L / k tokens. Everything in
a decoder layer except attention is position-wise, so it runs on the slice as it is. Attention is
where tokens meet: before it, an all-to-all turns [B, H, Lc, D] (all heads, my tokens) into
[B, H/k, L, D] (my heads, all tokens); every rank attends over the full sequence for its share of
heads with the full mask (causal + padding); a second all-to-all turns the output back into my tokens,
all heads (DeepSpeed-Ulysses, Jacobs et al. 2023). Communication per layer is 4 tensors of
B·L·H·D / k elements per rank, independent of k in total; memory for activations drops by k.

The function is registered with transformers' `AttentionInterface` under `ULYSSES`; `enable_ulysses`
switches a decoder to it. A forward is sequence-parallel when its decoder layers receive a `ulysses`
keyword (`UlyssesState`: the group and the full sequence's padding); otherwise it is plain sdpa.

Heads: the query heads must divide by k. Key/value heads (GQA) are split the same way when they
divide by k; otherwise they are first repeated to one per query head (more traffic, same result).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.distributed as dist
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

ULYSSES = "evr1_ulysses"


@dataclass
class UlyssesState:
    """What the attention function needs beyond its arguments during one sequence-parallel forward."""

    group: dist.ProcessGroup
    size: int
    key_valid: torch.Tensor | None  # [B, L] bool over the full padded sequence; None: no padding, plain causal


class _AllToAll(torch.autograd.Function):
    """Equal-split all-to-all along dim 0 ([k, ...] chunks); its adjoint is the same exchange."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, group: dist.ProcessGroup) -> torch.Tensor:
        ctx.group = group
        x = x.contiguous()
        out = torch.empty_like(x)
        dist.all_to_all_single(out, x, group=group)
        return out

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        grad = grad.contiguous()
        out = torch.empty_like(grad)
        dist.all_to_all_single(out, grad, group=ctx.group)
        return out, None


def seq_to_heads(x: torch.Tensor, group: dist.ProcessGroup, k: int) -> torch.Tensor:
    """[B, H, Lc, D] (all heads, local tokens) → [B, H/k, k·Lc, D] (local heads, all tokens)."""
    b, h, lc, d = x.shape
    chunks = x.view(b, k, h // k, lc, d).permute(1, 0, 2, 3, 4)  # [k (head group → dest rank), B, H/k, Lc, D]
    got = _AllToAll.apply(chunks, group)  # [k (source rank = token slice), B, H/k, Lc, D]
    return got.permute(1, 2, 0, 3, 4).reshape(b, h // k, k * lc, d)


def heads_to_seq(x: torch.Tensor, group: dist.ProcessGroup, k: int) -> torch.Tensor:
    """[B, H/k, L, D] (local heads, all tokens) → [B, H, L/k, D] (all heads, local tokens)."""
    b, hk, length, d = x.shape
    lc = length // k
    chunks = x.view(b, hk, k, lc, d).permute(2, 0, 1, 3, 4)  # [k (token slice → dest rank), B, H/k, Lc, D]
    got = _AllToAll.apply(chunks, group)  # [k (source rank = head group), B, H/k, Lc, D]
    return got.permute(1, 0, 2, 3, 4).reshape(b, k * hk, lc, d)


def _repeat_heads(x: torch.Tensor, n: int) -> torch.Tensor:
    """Each key/value head n times in a row (transformers' `repeat_kv`: query head h uses kv head h // n)."""
    return x if n == 1 else x.repeat_interleave(n, dim=1)


def full_mask(key_valid: torch.Tensor, dtype_device: torch.Tensor) -> torch.Tensor:
    """[B, 1, L, L] bool: causal and key not padding; a query with no visible key (left padding) sees itself,
    so padded rows stay finite (their outputs never reach a real token)."""
    length = key_valid.shape[1]
    idx = torch.arange(length, device=dtype_device.device)
    causal = idx[None, :] <= idx[:, None]
    allowed = causal[None] & key_valid[:, None, :]
    return (allowed | torch.eye(length, dtype=torch.bool, device=idx.device)[None])[:, None]


def ulysses_attention_forward(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    ulysses: UlyssesState | None = None,
    **kwargs,
) -> tuple[torch.Tensor, None]:
    """Attention over the whole sequence from a token slice; returns [B, Lc, H, D] like transformers' sdpa.

    `ulysses` travels with the decoder's keyword arguments (so gradient checkpointing's recompute in the
    backward sees it too); without it this is exactly transformers' sdpa attention, so a model switched
    to this implementation still runs every ordinary pass. With it, `attention_mask` (the model's mask for
    the local slice) is ignored: the full mask comes from the state."""
    if ulysses is None:
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                      **kwargs)
    st, k = ulysses, ulysses.size
    hq, hkv = query.shape[1], key.shape[1]
    if hq % k:
        raise ValueError(f"sequence_parallel={k} must divide the number of attention heads ({hq})")
    groups = hq // hkv
    if hkv % k:  # too few kv heads to split: one per query head
        key, value, groups = _repeat_heads(key, groups), _repeat_heads(value, groups), 1
    q, kk, v = (seq_to_heads(t, st.group, k) for t in (query, key, value))
    kk, v = _repeat_heads(kk, groups), _repeat_heads(v, groups)
    if st.key_valid is None:
        out = torch.nn.functional.scaled_dot_product_attention(q, kk, v, dropout_p=dropout, scale=scaling,
                                                               is_causal=True)
    else:
        out = torch.nn.functional.scaled_dot_product_attention(
            q, kk, v, attn_mask=full_mask(st.key_valid, q), dropout_p=dropout, scale=scaling)
    return heads_to_seq(out, st.group, k).transpose(1, 2).contiguous(), None


AttentionInterface.register(ULYSSES, ulysses_attention_forward)
AttentionMaskInterface.register(ULYSSES, sdpa_mask)


def enable_ulysses(text_config) -> None:
    """Switch a decoder's attention to `ulysses_attention_forward` (idempotent; the vision tower keeps its own).
    It stays switched: passes without a `ulysses` state run plain sdpa, and a checkpointed layer recomputed
    in the backward must find the same implementation it ran the forward with."""
    current = text_config._attn_implementation
    if current not in (ULYSSES, "sdpa", None):
        raise ValueError(f"sequence parallelism replaces sdpa attention; the model uses {current!r}")
    text_config._attn_implementation = ULYSSES
