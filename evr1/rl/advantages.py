"""Advantage estimators for outcome rewards: GRPO (and Dr. GRPO), RLOO, ReMax, REINFORCE++,
REINFORCE++-baseline, GDPO and Weighted-REINFORCE.

Every estimator is a pure function ``(scores, index, response_mask, **options) -> (advantages,
returns)`` registered by name in ``ADVANTAGE_ESTIMATORS``; ``compute_advantages`` dispatches.

* ``scores``: one outcome reward per response, ``[B]``. A token-level reward tensor ``[B, L]``
  (e.g. the output of ``apply_kl_in_reward``) is also accepted: group estimators sum it over valid
  tokens first, as EasyR1 and verl do; token-level estimators (REINFORCE++, ReMax) use it as is.
  GDPO takes a mapping ``reward name -> [B]`` instead.
* ``index``: the group id (uid) of each response; any hashables, groups need not be contiguous.
* ``response_mask``: ``[B, L]``, 1 on response tokens. Advantages are 0 on padding.

Conventions (defaults of EasyR1 and verl, see docs/rl.md): sample std, ``eps`` added to the std,
token-weighted batch whitening with the unbiased variance and ``1e-8`` inside the square root.
A group whose members all share one score — a single-member group included — gives exactly zero
advantage (verl instead passes a lone response's raw reward through; EasyR1 refuses it).
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Mapping
from typing import Any

import torch

from evr1.rl.groups import GroupStats, group_ids
from evr1.rl.masked import as_bool_mask, masked_whiten

__all__ = ["compute_advantages", "ADVANTAGE_ESTIMATORS", "register_estimator", "scores_to_token_rewards"]

AdvantageFn = Callable[..., tuple[torch.Tensor, torch.Tensor]]
ADVANTAGE_ESTIMATORS: dict[str, AdvantageFn] = {}

_STD_KINDS = ("sample", "population", "none")


def register_estimator(name: str) -> Callable[[AdvantageFn], AdvantageFn]:
    """Add an estimator to the registry under ``name`` (the value of ``algorithm.adv_estimator``)."""

    def add(fn: AdvantageFn) -> AdvantageFn:
        if name in ADVANTAGE_ESTIMATORS:
            raise ValueError(f"advantage estimator {name!r} is already registered")
        ADVANTAGE_ESTIMATORS[name] = fn
        return fn

    return add


def compute_advantages(
    estimator: str, scores: Any, index: Any, response_mask: torch.Tensor, **options: Any
) -> tuple[torch.Tensor, torch.Tensor]:
    """Compute ``(advantages, returns)``, both ``[B, L]``, with the named estimator.

    Raises ValueError for an unknown estimator (listing the known ones) or an option the estimator
    does not take (listing the ones it does).
    """
    fn = ADVANTAGE_ESTIMATORS.get(estimator)
    if fn is None:
        raise ValueError(f"unknown advantage estimator {estimator!r}; known: {sorted(ADVANTAGE_ESTIMATORS)}")
    allowed = [p.name for p in inspect.signature(fn).parameters.values() if p.kind is p.KEYWORD_ONLY]
    unknown = sorted(set(options) - set(allowed))
    if unknown:
        raise ValueError(f"advantage estimator {estimator!r} got unknown option(s) {unknown}; it takes {allowed}")
    mask = as_bool_mask(response_mask)
    if mask.dim() != 2:
        raise ValueError(f"response_mask must be [B, L], got shape {tuple(mask.shape)}")
    return fn(scores, index, mask, **options)


# ----------------------------------------------------------------------------------------------
# input handling


def _float_tensor(values: Any, name: str, device: torch.device) -> torch.Tensor:
    # Advantages are constants of the policy update: never let a gradient path run into rewards.
    tensor = torch.as_tensor(values, device=device).detach()
    if not tensor.is_floating_point():
        tensor = tensor.to(torch.get_default_dtype())
    bad = (~torch.isfinite(tensor)).nonzero()
    if bad.numel():
        position = tuple(bad[0].tolist())
        where = position[0] if len(position) == 1 else position
        raise ValueError(f"{name}[{where}] is {tensor[position].item()}; rewards must be finite")
    return tensor


def _checked_scores(scores: Any, mask: torch.Tensor, name: str = "scores") -> torch.Tensor:
    """``scores`` as a float tensor ``[B]`` or ``[B, L]`` matching ``mask``."""
    if isinstance(scores, Mapping):
        raise TypeError(f"{name} is a mapping of rewards; only the 'gdpo' estimator takes several rewards")
    tensor = _float_tensor(scores, name, mask.device)
    batch, length = mask.shape
    if tensor.dim() == 1 and tensor.shape[0] == batch:
        return tensor
    if tensor.dim() == 2 and tuple(tensor.shape) == (batch, length):
        return tensor
    raise ValueError(
        f"{name} must be [B] = [{batch}] (one reward per response) or [B, L] = [{batch}, {length}] "
        f"(token-level rewards), got shape {tuple(tensor.shape)}"
    )


def _outcome(scores: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """One reward per response: token-level rewards are summed over valid tokens."""
    if scores.dim() == 1:
        return scores
    return torch.where(mask, scores, torch.zeros_like(scores)).sum(dim=-1)


def scores_to_token_rewards(scores: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor:
    """Place each response's outcome reward ``[B]`` on its last valid token, ``[B, L]``.

    This is how EasyR1 and verl store outcome rewards (``token_level_scores``). A response
    without valid tokens gets no reward anywhere.
    """
    mask = as_bool_mask(response_mask)
    scores = _checked_scores(scores, mask)
    if scores.dim() == 2:
        return torch.where(mask, scores, torch.zeros_like(scores))
    positions = torch.arange(mask.shape[1], device=mask.device).expand_as(mask)
    last = torch.where(mask, positions, torch.full_like(positions, -1)).amax(dim=-1)
    rewards = torch.zeros(mask.shape, dtype=scores.dtype, device=mask.device)
    has_tokens = last >= 0
    rows = torch.arange(mask.shape[0], device=mask.device)[has_tokens]
    rewards[rows, last[has_tokens]] = scores[has_tokens]
    return rewards


def _broadcast(per_response: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``a[:, None]`` on valid tokens, 0 on padding (EasyR1's ReMax forgot the trailing axis)."""
    return torch.where(mask, per_response[:, None], torch.zeros((), dtype=per_response.dtype, device=mask.device))


def _check_std(std: str, eps: float) -> None:
    if std not in _STD_KINDS:
        raise ValueError(f"option std must be one of {list(_STD_KINDS)}, got {std!r}")
    if not (math.isfinite(eps) and eps >= 0):
        raise ValueError(f"option eps must be a finite number >= 0, got {eps!r}")


def _group_normalised(outcome: torch.Tensor, index: Any, std: str, eps: float) -> torch.Tensor:
    """``(R - μ_g) / (σ_g + eps)`` per response (no division for ``std="none"``); 0 for constant groups."""
    groups, num_groups = group_ids(index, outcome.shape[0], outcome.device)
    stats = GroupStats(outcome, groups, num_groups)
    centred = outcome - stats.mean
    normalised = centred if std == "none" else centred / (stats.std(std) + eps)
    return torch.where(stats.constant, torch.zeros_like(normalised), normalised)


# ----------------------------------------------------------------------------------------------
# estimators


@register_estimator("grpo")
def grpo(
    scores: Any, index: Any, response_mask: torch.Tensor, *, std: str = "sample", eps: float = 1e-6
) -> tuple[torch.Tensor, torch.Tensor]:
    """GRPO: ``a_i = (R_i - mean_g) / (std_g + eps)``, broadcast over valid tokens; returns = advantages.

    ``std="sample"`` (Bessel, EasyR1/verl default), ``"population"``, or ``"none"`` (Dr. GRPO: centring
    only). ``eps`` (1e-6) is added to the std, not under a square root.
    """
    _check_std(std, eps)
    outcome = _outcome(_checked_scores(scores, response_mask), response_mask)
    advantages = _broadcast(_group_normalised(outcome, index, std, eps), response_mask)
    return advantages, advantages


@register_estimator("rloo")
def rloo(scores: Any, index: Any, response_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """RLOO: ``a_i = R_i - mean_{j != i} R_j`` (= k/(k-1)·(R_i - mean_g)); returns = advantages.

    A single-member group has no leave-one-out baseline and gets 0.
    """
    outcome = _outcome(_checked_scores(scores, response_mask), response_mask)
    groups, num_groups = group_ids(index, outcome.shape[0], outcome.device)
    stats = GroupStats(outcome, groups, num_groups)
    others = (stats.count - 1).clamp(min=1)
    per_response = outcome - (stats.group_sum - outcome) / others
    per_response = torch.where(stats.constant, torch.zeros_like(per_response), per_response)
    advantages = _broadcast(per_response, response_mask)
    return advantages, advantages


def _reverse_discounted(rewards: torch.Tensor, mask: torch.Tensor, gamma: float) -> torch.Tensor:
    """``G_t = r_t + γ·G_{t+1}``, the running return reset after every masked position (EasyR1/verl)."""
    returns = torch.zeros_like(rewards)
    running = torch.zeros_like(rewards[:, 0])
    for t in reversed(range(rewards.shape[1])):
        running = rewards[:, t] + gamma * running
        returns[:, t] = running
        running = running * mask[:, t]
    return torch.where(mask, returns, torch.zeros_like(returns))


@register_estimator("remax")
def remax(
    scores: Any, index: Any, response_mask: torch.Tensor, *, baseline_scores: Any = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """ReMax: ``A[i,t] = G[i,t] - b_i`` with ``b_i`` the score of the greedy response for the same prompt.

    ``G`` is the undiscounted return-to-go (= ``R_i`` on every valid token for outcome rewards);
    returns = ``G``. ``index`` is only checked for length: the baseline is per response already.
    """
    if baseline_scores is None:
        raise ValueError("the 'remax' estimator needs option baseline_scores (the greedy response's score, [B])")
    token_rewards = scores_to_token_rewards(scores, response_mask)
    batch = response_mask.shape[0]
    group_ids(index, batch)
    baseline = _float_tensor(baseline_scores, "baseline_scores", response_mask.device).to(token_rewards.dtype)
    if tuple(baseline.shape) != (batch,):
        raise ValueError(f"baseline_scores must be [B] = [{batch}], got shape {tuple(baseline.shape)}")
    returns = _reverse_discounted(token_rewards, response_mask, 1.0)
    advantages = returns - _broadcast(baseline, response_mask)
    return advantages, returns


@register_estimator("reinforce_plus_plus")
def reinforce_plus_plus(
    scores: Any, index: Any, response_mask: torch.Tensor, *, gamma: float = 1.0
) -> tuple[torch.Tensor, torch.Tensor]:
    """REINFORCE++: discounted token returns, whitened over all valid tokens of the batch (no groups).

    ``index`` is only checked for length. Returns the un-whitened discounted returns.
    """
    if not (0.0 <= gamma <= 1.0):
        raise ValueError(f"option gamma must be in [0, 1], got {gamma!r}")
    token_rewards = scores_to_token_rewards(scores, response_mask)
    group_ids(index, response_mask.shape[0])
    returns = _reverse_discounted(token_rewards, response_mask, gamma)
    return masked_whiten(returns, response_mask), returns


@register_estimator("reinforce_plus_plus_baseline")
def reinforce_plus_plus_baseline(
    scores: Any, index: Any, response_mask: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """REINFORCE++-baseline (verl): ``R_i - mean_g`` broadcast to tokens, then batch-whitened."""
    outcome = _outcome(_checked_scores(scores, response_mask), response_mask)
    centred = _group_normalised(outcome, index, "none", 0.0)
    advantages = masked_whiten(_broadcast(centred, response_mask), response_mask)
    return advantages, advantages


@register_estimator("gdpo")
def gdpo(
    scores: Any,
    index: Any,
    response_mask: torch.Tensor,
    *,
    std: str = "sample",
    eps: float = 1e-6,
    weights: Mapping[str, float] | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """GDPO: GRPO-normalise each reward separately per group, (weighted) sum, whiten over valid tokens.

    ``scores`` maps reward names (e.g. ``accuracy``, ``format``) to ``[B]`` tensors. ``weights``
    (default 1 each) scales each normalised reward before the sum, as TRL's ``reward_weights``.
    """
    _check_std(std, eps)
    if not isinstance(scores, Mapping) or not scores:
        raise TypeError("the 'gdpo' estimator needs scores as a non-empty mapping reward name -> [B] tensor")
    weights = dict(weights or {})
    unknown = sorted(set(weights) - set(scores))
    if unknown:
        raise ValueError(f"option weights names reward(s) {unknown} that are not in scores {sorted(scores)}")
    total = None
    for name, values in scores.items():
        outcome = _outcome(_checked_scores(values, response_mask, name=f"scores[{name!r}]"), response_mask)
        term = weights.get(name, 1.0) * _group_normalised(outcome, index, std, eps)
        total = term if total is None else total + term.to(total.dtype)
    advantages = masked_whiten(_broadcast(total, response_mask), response_mask)
    return advantages, advantages


@register_estimator("w_reinforce")
def w_reinforce(
    scores: Any, index: Any, response_mask: torch.Tensor, *, positive_weight: float = 0.1
) -> tuple[torch.Tensor, torch.Tensor]:
    """Weighted-REINFORCE (Zhu et al. 2025, "The Surprising Effectiveness of Negative Reinforcement"):
    ``a_i = λ·R_i − (1 − R_i)`` for rewards in [0, 1], no baseline; returns = advantages.

    A right answer (R = 1) is pushed up by ``λ`` (``positive_weight``, 0.1 in the paper), a wrong one
    (R = 0) down by 1; a partial reward (IoU) lies on the line between. Without a group baseline a
    group whose members all earned 0 still pushes its answer down, where GRPO gives it exactly zero
    advantage: the probability leaves the confident wrong answer and spreads over the others in
    proportion to what the policy already gives them. ``index`` is only checked for length.

    In expectation it is REINFORCE scaled by 1 + λ (a constant baseline moves the noise, not the mean),
    so it corrects nothing GRPO cannot; from a policy at chance it learnt more slowly than Dr. GRPO
    (docs/learning.md, "Weighted-REINFORCE"). Its paper's gains are in pass@k of pretrained models.
    """
    if not (math.isfinite(positive_weight) and positive_weight >= 0):
        raise ValueError(f"option positive_weight must be a finite number >= 0, got {positive_weight!r}")
    outcome = _outcome(_checked_scores(scores, response_mask), response_mask)
    group_ids(index, outcome.shape[0], outcome.device)
    advantages = _broadcast(positive_weight * outcome - (1.0 - outcome), response_mask)
    return advantages, advantages
