"""Entropy of the next-token distribution from logits, and the high-entropy tokens a loss may keep."""

from __future__ import annotations

import torch

__all__ = ["entropy_from_logits", "high_entropy_mask"]


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


def high_entropy_mask(entropy: torch.Tensor, mask: torch.Tensor, ratio: float) -> torch.Tensor:
    """The valid tokens among the top ``ratio`` by entropy, as a float mask like ``mask`` ``[B, L]``.

    Wang et al. 2025 ("Beyond the 80/20 rule"): the policy gradient restricted to the highest-entropy
    fifth of the response tokens (the forks where the policy decides) learns as well or better than on
    every token. The threshold is the ``1 − ratio`` quantile of the valid tokens' entropies; ties at the
    threshold are kept. ``ratio`` ≥ 1 keeps every valid token; an empty mask stays empty.
    """
    if not 0.0 < ratio:
        raise ValueError(f"top_entropy_ratio must be in (0, 1], got {ratio}")
    valid = mask.bool()
    if ratio >= 1.0:
        return valid.float()
    # The quantile of the valid entries, padding as NaN (ignored): no boolean indexing, whose output
    # size the host must read, so a GPU trainer does not wait for the device here. An empty mask gives
    # a NaN threshold, which no entry reaches: the mask stays empty.
    values = entropy.detach().float()
    threshold = torch.nanquantile(torch.where(valid, values, torch.full_like(values, float("nan"))).flatten(),
                                  1.0 - ratio)
    return (valid & (values >= threshold)).float()
