"""Group bookkeeping: map per-response group ids (uids) to dense integers and reduce per group.

Groups are identified by id, never by position: the trainer reorders the batch for load
balancing before advantages are computed, so the responses of one prompt need not be adjacent.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from typing import Any

import torch

__all__ = ["group_ids", "group_mean", "group_std", "group_count", "GroupStats"]


def _as_hashable_list(index: Any) -> list[Hashable]:
    """Turn a list, tuple, numpy array or tensor of ids into a list of python hashables."""
    if isinstance(index, torch.Tensor) or hasattr(index, "tolist"):
        # numpy / torch: tolist() yields plain python scalars (np.str_ → str), which hash reliably.
        index = index.tolist()
    if isinstance(index, (str, bytes)) or not isinstance(index, Iterable):
        raise TypeError(f"index must be a sequence of group ids (one per response), got {type(index).__name__}")
    ids = list(index)
    for position, uid in enumerate(ids):
        if not isinstance(uid, Hashable):
            raise TypeError(f"index[{position}] = {uid!r} is not hashable and cannot be a group id")
    return ids


def group_ids(index: Any, batch_size: int, device: torch.device | None = None) -> tuple[torch.Tensor, int]:
    """Dense group numbers ``[B]`` (in order of first appearance) and the number of groups."""
    ids = _as_hashable_list(index)
    if len(ids) != batch_size:
        raise ValueError(f"index has {len(ids)} group ids but scores has {batch_size} responses")
    dense: dict[Hashable, int] = {}
    numbers = [dense.setdefault(uid, len(dense)) for uid in ids]
    return torch.tensor(numbers, dtype=torch.long, device=device), len(dense)


class GroupStats:
    """Per-response group statistics of a score vector, computed with scatter-adds (no python loop)."""

    def __init__(self, scores: torch.Tensor, groups: torch.Tensor, num_groups: int) -> None:
        self.scores = scores
        self.groups = groups
        zeros = torch.zeros(num_groups, dtype=scores.dtype, device=scores.device)
        self.count_per_group = zeros.index_add(0, groups, torch.ones_like(scores))
        self.sum_per_group = zeros.index_add(0, groups, scores)
        self.mean_per_group = self.sum_per_group / self.count_per_group
        self.num_groups = num_groups

    @property
    def constant(self) -> torch.Tensor:
        """True for responses whose whole group shares one score (single-member groups included), ``[B]``.

        Tested exactly (max == min) rather than via ``std == 0``: ``R - mean`` of a constant group
        can be a rounding residue like 1e-17, and such groups must give exactly zero advantage.
        """
        fill = self.scores.new_zeros(self.num_groups)
        high = fill.scatter_reduce(0, self.groups, self.scores, reduce="amax", include_self=False)
        low = fill.scatter_reduce(0, self.groups, self.scores, reduce="amin", include_self=False)
        return (high == low)[self.groups]

    @property
    def count(self) -> torch.Tensor:
        """Size of each response's group, ``[B]``."""
        return self.count_per_group[self.groups]

    @property
    def mean(self) -> torch.Tensor:
        """Mean score of each response's group, ``[B]``."""
        return self.mean_per_group[self.groups]

    @property
    def group_sum(self) -> torch.Tensor:
        """Sum of the scores of each response's group, ``[B]``."""
        return self.sum_per_group[self.groups]

    def std(self, kind: str) -> torch.Tensor:
        """Standard deviation of each response's group, ``[B]``: ``sample`` (Bessel) or ``population``.

        A single-member group has an undefined sample std; it is reported as 0, which (with the
        numerator ``R - μ = 0``) gives the member a zero advantage.
        """
        deviation = self.scores - self.mean
        zeros = torch.zeros_like(self.sum_per_group)
        squared = zeros.index_add(0, self.groups, deviation * deviation)
        if kind == "sample":
            denominator = (self.count_per_group - 1).clamp(min=1)
        elif kind == "population":
            denominator = self.count_per_group
        else:
            raise ValueError(f"std kind must be 'sample' or 'population', got {kind!r}")
        return torch.sqrt(squared / denominator)[self.groups]


def group_count(index: Any, batch_size: int) -> torch.Tensor:
    """Size of each response's group, ``[B]`` (long)."""
    groups, num_groups = group_ids(index, batch_size)
    return torch.bincount(groups, minlength=num_groups)[groups]


def group_mean(scores: torch.Tensor, index: Any) -> torch.Tensor:
    """Mean score of each response's group, ``[B]``."""
    groups, num_groups = group_ids(index, scores.shape[0], scores.device)
    return GroupStats(scores, groups, num_groups).mean


def group_std(scores: torch.Tensor, index: Any, kind: str = "sample") -> torch.Tensor:
    """Standard deviation of each response's group, ``[B]``."""
    groups, num_groups = group_ids(index, scores.shape[0], scores.device)
    return GroupStats(scores, groups, num_groups).std(kind)
