"""Masked reductions over right-padded response tensors, plus shared input checks.

Padding positions may hold anything (zeros, garbage, even ``inf``/``nan`` from a padded
log-softmax), so every reduction here *selects* valid entries with ``torch.where`` instead of
multiplying by the mask: ``nan * 0`` is still ``nan``.
"""

from __future__ import annotations

import torch

__all__ = ["masked_mean", "masked_sum", "masked_whiten", "masked_var", "check_same_shape", "as_bool_mask"]


def as_bool_mask(mask: torch.Tensor, name: str = "response_mask") -> torch.Tensor:
    """Return ``mask`` as a bool tensor; accepts bool, integer or 0/1 float masks."""
    if not isinstance(mask, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(mask).__name__}")
    return mask if mask.dtype == torch.bool else mask != 0


def check_same_shape(reference_name: str, reference: torch.Tensor, **others: torch.Tensor) -> None:
    """Raise a ValueError naming the argument whose shape differs from ``reference``'s."""
    for name, tensor in others.items():
        if not isinstance(tensor, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(tensor).__name__}")
        if tensor.shape != reference.shape:
            raise ValueError(
                f"{name} has shape {tuple(tensor.shape)} but {reference_name} has shape {tuple(reference.shape)}"
            )


def masked_sum(x: torch.Tensor, mask: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """Sum of ``x`` over positions where ``mask`` is set (over all of them when ``dim`` is None)."""
    selected = torch.where(as_bool_mask(mask), x, torch.zeros((), dtype=x.dtype, device=x.device))
    return selected.sum() if dim is None else selected.sum(dim=dim)


def masked_mean(x: torch.Tensor, mask: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """Mean of ``x`` over valid positions; 0 where nothing is valid (instead of ``0/0 = nan``).

    verl and EasyR1 add 1e-8 to the denominator; counting valid entries and clamping the count at 1
    gives the exact mean whenever at least one entry is valid, and 0 otherwise.
    """
    bool_mask = as_bool_mask(mask)
    count = bool_mask.sum() if dim is None else bool_mask.sum(dim=dim)
    return masked_sum(x, bool_mask, dim) / count.clamp(min=1).to(x.dtype)


def masked_var(x: torch.Tensor, mask: torch.Tensor, unbiased: bool = True) -> torch.Tensor:
    """Variance of the valid entries of ``x`` (Bessel-corrected by default, as EasyR1 and verl).

    With fewer than two valid entries the unbiased variance is undefined; we return 0 so that
    whitening then maps every valid entry to 0 instead of raising mid-training.
    """
    bool_mask = as_bool_mask(mask)
    n = bool_mask.sum().to(x.dtype)
    mean = masked_mean(x, bool_mask)
    squared = masked_sum((x - mean) ** 2, bool_mask)
    denominator = n - 1 if unbiased else n
    if denominator <= 0:
        return torch.zeros((), dtype=x.dtype, device=x.device)
    return squared / denominator


def masked_whiten(
    x: torch.Tensor, mask: torch.Tensor, *, shift_mean: bool = True, eps: float = 1e-8
) -> torch.Tensor:
    """Normalise the valid entries of ``x`` to zero mean and unit (unbiased) variance.

    ``(x - μ) · (var + eps)^(-1/2)`` with μ and var taken over valid entries only, token-weighted:
    the REINFORCE++ / GDPO batch whitening of EasyR1 and verl. ``shift_mean=False`` rescales
    without centring. Padding positions are 0 in the result.
    """
    bool_mask = as_bool_mask(mask)
    check_same_shape("x", x, mask=bool_mask)
    mean = masked_mean(x, bool_mask)
    var = masked_var(x, bool_mask, unbiased=True)
    whitened = (x - mean) * torch.rsqrt(var + eps)
    if not shift_mean:
        whitened = whitened + mean
    return torch.where(bool_mask, whitened, torch.zeros((), dtype=x.dtype, device=x.device))
