"""Reduce a per-token loss matrix ``[B, L]`` to the scalar that is back-propagated.

The four modes are verl's (``actor.loss_agg_mode``); docs/rl.md maps EasyR1's and TRL's names.

Micro-batching: pass ``global_token_count`` (the number of valid tokens in the whole mini-batch,
all-reduced over ranks) and ``token-mean`` returns ``Σ ℓ·m / global_token_count``, so summing the
micro-batch losses of all ranks gives the exact mini-batch token mean (EasyR1's behaviour). Note
that DDP/FSDP *average* gradients over ranks: the caller multiplies by the world size (as EasyR1
does) or all-reduces with a sum. Sequence modes take ``global_seq_count`` for the same exactness;
given only ``global_token_count`` they fall back on EasyR1's token-share rescaling (local value ×
local tokens / global tokens), which is only approximately a global sequence mean.
``seq-mean-token-sum-norm`` is a plain sum over a constant and decomposes exactly by itself.
"""

from __future__ import annotations

import numbers
from collections.abc import Callable

import torch

from evr1.rl.masked import as_bool_mask, check_same_shape

__all__ = ["aggregate_loss", "AGGREGATION_MODES"]


def _sequence_values(loss: torch.Tensor, mask: torch.Tensor, per_token_mean: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-sequence token sum (or token mean) and a mask of the sequences with at least one valid token."""
    summed = torch.where(mask, loss, torch.zeros((), dtype=loss.dtype, device=loss.device)).sum(dim=-1)
    lengths = mask.sum(dim=-1)
    values = summed / lengths.clamp(min=1).to(loss.dtype) if per_token_mean else summed
    return values, lengths > 0


def _sequence_mean(per_token_mean: bool) -> Callable[..., torch.Tensor]:
    def aggregate(
        loss: torch.Tensor,
        mask: torch.Tensor,
        *,
        global_token_count: float | torch.Tensor | None,
        global_seq_count: float | torch.Tensor | None,
        loss_scale_factor: float | None,
    ) -> torch.Tensor:
        values, non_empty = _sequence_values(loss, mask, per_token_mean)
        total = torch.where(non_empty, values, torch.zeros_like(values)).sum()
        if global_seq_count is not None:
            return total / _positive("global_seq_count", global_seq_count, loss)
        local_mean = total / non_empty.sum().clamp(min=1).to(loss.dtype)
        if global_token_count is not None:
            share = mask.sum().to(loss.dtype) / _positive("global_token_count", global_token_count, loss)
            return local_mean * share
        return local_mean

    return aggregate


def _token_mean(
    loss: torch.Tensor,
    mask: torch.Tensor,
    *,
    global_token_count: float | torch.Tensor | None,
    global_seq_count: float | torch.Tensor | None,
    loss_scale_factor: float | None,
) -> torch.Tensor:
    total = torch.where(mask, loss, torch.zeros((), dtype=loss.dtype, device=loss.device)).sum()
    if global_token_count is not None:
        return total / _positive("global_token_count", global_token_count, loss)
    return total / mask.sum().clamp(min=1).to(loss.dtype)


def _token_sum_norm(
    loss: torch.Tensor,
    mask: torch.Tensor,
    *,
    global_token_count: float | torch.Tensor | None,
    global_seq_count: float | torch.Tensor | None,
    loss_scale_factor: float | None,
) -> torch.Tensor:
    # Dr. GRPO: a constant denominator removes the per-response length normalisation. verl's default
    # constant is the padded response length; TRL's dr_grpo divides by B·max_completion_length.
    scale = loss.shape[-1] if loss_scale_factor is None else loss_scale_factor
    total = torch.where(mask, loss, torch.zeros((), dtype=loss.dtype, device=loss.device)).sum()
    return total / _positive("loss_scale_factor", scale, loss)


def _positive(name: str, value: float | torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    if not isinstance(value, numbers.Real):  # a tensor (its sign not checked: no host read), or not a number
        tensor = torch.as_tensor(value, dtype=like.dtype, device=like.device)
        if tensor.dim() != 0:
            raise ValueError(f"{name} must be a scalar, got shape {tuple(tensor.shape)}")
        return tensor
    if not value > 0:
        raise ValueError(f"{name} must be > 0, got {value!r}")
    # Filled on the device: `torch.as_tensor(value, device=...)` copies from host memory, and that
    # copy waits for the device to run everything queued (a host stall per micro-batch on a GPU).
    return torch.full((), value, dtype=like.dtype, device=like.device)


AGGREGATION_MODES: dict[str, Callable[..., torch.Tensor]] = {
    "token-mean": _token_mean,
    "seq-mean-token-sum": _sequence_mean(per_token_mean=False),
    "seq-mean-token-mean": _sequence_mean(per_token_mean=True),
    "seq-mean-token-sum-norm": _token_sum_norm,
}


def aggregate_loss(
    per_token_loss: torch.Tensor,
    mask: torch.Tensor,
    mode: str = "token-mean",
    *,
    global_token_count: float | torch.Tensor | None = None,
    global_seq_count: float | torch.Tensor | None = None,
    loss_scale_factor: float | None = None,
) -> torch.Tensor:
    """Aggregate ``per_token_loss`` ``[B, L]`` over valid tokens into a 0-d tensor.

    * ``token-mean``: ``Σ ℓ·m / Σ m`` (or ``/ global_token_count``).
    * ``seq-mean-token-mean``: mean over sequences with ≥1 valid token of each sequence's token mean.
    * ``seq-mean-token-sum``: mean over sequences with ≥1 valid token of each sequence's token sum.
    * ``seq-mean-token-sum-norm``: ``Σ ℓ·m / C``, ``C = loss_scale_factor`` or the padded length L.

    An empty mask gives 0 (with a gradient of 0), never ``nan``.
    """
    aggregate = AGGREGATION_MODES.get(mode)
    if aggregate is None:
        raise ValueError(f"unknown loss_agg_mode {mode!r}; known: {sorted(AGGREGATION_MODES)}")
    bool_mask = as_bool_mask(mask, "mask")
    check_same_shape("per_token_loss", per_token_loss, mask=bool_mask)
    if per_token_loss.dim() != 2:
        raise ValueError(f"per_token_loss must be [B, L], got shape {tuple(per_token_loss.shape)}")
    return aggregate(
        per_token_loss,
        bool_mask,
        global_token_count=global_token_count,
        global_seq_count=global_seq_count,
        loss_scale_factor=loss_scale_factor,
    )
