"""Entropy of the next-token distribution from logits."""

from __future__ import annotations

import torch

__all__ = ["entropy_from_logits"]


def entropy_from_logits(logits: torch.Tensor) -> torch.Tensor:
    """Entropy ``H = −Σ_v p_v log p_v`` over the last dimension, ``[..., V] → [...]``.

    Computed from ``log_softmax`` (stable for large logits). Vocabulary entries masked with
    ``−inf`` contribute 0 to the value and to the gradient (a naive ``p · log p`` would give
    ``0 · −inf = nan``). Half-precision logits are upcast to float32 for the reduction; the
    result comes back in the input dtype. Pass temperature-scaled logits to get the entropy of the
    sampling distribution.
    """
    if logits.dim() == 0:
        raise ValueError("logits must have a vocabulary dimension, got a 0-d tensor")
    compute_dtype = torch.float32 if logits.dtype in (torch.float16, torch.bfloat16) else logits.dtype
    log_p = torch.log_softmax(logits.to(compute_dtype), dim=-1)
    # Zero the log-prob where p = 0 *before* multiplying, so neither value nor gradient sees −inf.
    safe_log_p = torch.where(torch.isneginf(log_p), torch.zeros_like(log_p), log_p)
    entropy = -(log_p.exp() * safe_log_p).sum(dim=-1)
    return entropy.to(logits.dtype)
