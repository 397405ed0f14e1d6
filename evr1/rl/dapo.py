"""DAPO's batch-shaping helpers: dynamic sampling (group filtering) and the soft overlong penalty."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from evr1.rl.groups import GroupStats, group_ids

__all__ = ["dynamic_sampling_keep", "overlong_penalty", "DYNAMIC_SAMPLING_RULES"]


def _varying(stats: GroupStats, low: float | None, high: float | None) -> torch.Tensor:
    # "Scores vary" is tested exactly (max != min): a group of equal scores gives zero GRPO
    # advantage whatever its value, and a single response has nothing to compare with.
    if low is not None or high is not None:
        raise ValueError("rule 'std' takes no low/high bounds; use rule='mean_range' for those")
    return ~stats.constant


def _mean_inside(stats: GroupStats, low: float | None, high: float | None) -> torch.Tensor:
    if low is None or high is None:
        raise ValueError("rule 'mean_range' needs both low and high (e.g. low=0.01, high=0.99)")
    if not low < high:
        raise ValueError(f"rule 'mean_range' needs low < high, got low={low!r}, high={high!r}")
    return (stats.mean > low) & (stats.mean < high)


DYNAMIC_SAMPLING_RULES: dict[str, Callable[[GroupStats, float | None, float | None], torch.Tensor]] = {
    "std": _varying,
    "mean_range": _mean_inside,
}


def dynamic_sampling_keep(
    scores: Any, index: Any, *, rule: str = "std", low: float | None = None, high: float | None = None
) -> torch.Tensor:
    """Boolean mask ``[B]`` over responses: True for members of groups worth training on.

    * ``rule="std"`` (verl's DAPO recipe): keep groups whose scores are not all equal. Unlike verl,
      single-member groups are dropped: their GRPO advantage is zero here.
    * ``rule="mean_range"`` (EasyR1 ``online_filtering``, OpenRLHF): keep groups whose mean score
      lies strictly inside ``(low, high)``. Only equivalent to ``std`` on a binary metric.
    """
    check = DYNAMIC_SAMPLING_RULES.get(rule)
    if check is None:
        raise ValueError(f"unknown dynamic sampling rule {rule!r}; known: {sorted(DYNAMIC_SAMPLING_RULES)}")
    values = torch.as_tensor(scores)
    if not values.is_floating_point():
        values = values.to(torch.get_default_dtype())
    if values.dim() != 1:
        raise ValueError(f"scores must be [B] (one score per response), got shape {tuple(values.shape)}")
    groups, num_groups = group_ids(index, values.shape[0], values.device)
    return check(GroupStats(values, groups, num_groups), low, high)


def overlong_penalty(
    lengths: Any, *, max_response_length: int, buffer_len: int, penalty_factor: float = 1.0
) -> torch.Tensor:
    """DAPO's soft overlong punishment, one value (≤ 0) per response, to add to its reward.

    With ``L_max = max_response_length`` and ``L_buf = buffer_len``: 0 up to ``L_max − L_buf``,
    then falling linearly to ``−penalty_factor`` at ``L_max``, and ``−penalty_factor`` beyond it.
    """
    if not 0 < buffer_len <= max_response_length:
        raise ValueError(
            f"buffer_len must be in (0, max_response_length={max_response_length}], got {buffer_len!r}"
        )
    if not penalty_factor >= 0:
        raise ValueError(f"penalty_factor must be >= 0, got {penalty_factor!r}")
    length = torch.as_tensor(lengths)
    length = length.to(torch.get_default_dtype()) if not length.is_floating_point() else length
    if (length < 0).any():
        position = int((length < 0).nonzero()[0, 0]) if length.dim() else 0
        raise ValueError(f"lengths[{position}] is negative; response lengths must be >= 0")
    start = max_response_length - buffer_len
    ramp = (start - length) / buffer_len * penalty_factor
    penalty = torch.where(length <= start, torch.zeros_like(length), ramp)
    return torch.where(length > max_response_length, torch.full_like(length, -penalty_factor), penalty)
