"""Policy-gradient losses: PPO clip (with DAPO's clip-higher and dual clip), Clip-Cov, GSPO, CISPO and SAPO.

Each kind is a function from ``(log_probs, old_log_probs, advantages, mask, **options)`` to a
per-token loss ``[B, L]`` and metrics; ``policy_loss`` dispatches on the name, aggregates with
``loss_agg_mode`` (each kind has its reference default) and returns ``(loss, metrics)``.

The per-token importance ratio is ``r = exp(clamp(log_probs − old_log_probs, −20, 20))``: the
clamp (EasyR1, verl, OpenRLHF) keeps ``exp`` finite for a stale token. ``old_log_probs`` and
``advantages`` are detached here: no gradient ever reaches them.

Metrics are detached 0-d tensors on the input's device (call ``.item()`` when logging, so a GPU
trainer does not synchronise on every micro-batch); every kind reports the same keys:

* ``clipfrac_high`` / ``clipfrac_low``: fraction of valid tokens whose ratio is clipped at the
  upper bound with ``A > 0`` / at the lower bound with ``A < 0`` (the tokens whose gradient the
  clip removes; for CISPO: the tokens whose weight is capped, whatever the sign of ``A``);
  ``clipfrac = clipfrac_high + clipfrac_low``.
* ``clipfrac_dual``: fraction of valid tokens where the dual clip (``A < 0``) is active.
* ``approx_kl``: masked mean of ``old_log_probs − log_probs`` (k1 estimate of KL(old‖new)).
* ``ratio_mean`` / ``ratio_min`` / ``ratio_max`` over valid tokens (GSPO: the sequence ratio);
  ``nan`` for min/max when no token is valid.

Clip-Cov adds two of its own: ``clipcov_frac`` (the share of valid tokens whose gradient it
removed) and ``clipcov_candidate_frac`` (the share whose covariance lay inside its band).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from evr1.rl.aggregation import AGGREGATION_MODES, aggregate_loss
from evr1.rl.masked import as_bool_mask, check_same_shape, masked_mean

__all__ = ["policy_loss", "POLICY_LOSSES", "PolicyLossKind"]

_LOG_RATIO_BOUND = 20.0
_GSPO_MAX_LOG_RATIO = 10.0  # verl's cap on the sequence log-ratio

Metrics = dict[str, torch.Tensor]
PerTokenLoss = Callable[..., tuple[torch.Tensor, Metrics]]


@dataclass(frozen=True)
class PolicyLossKind:
    """A registered loss: its per-token function and the aggregation its reference uses by default."""

    per_token: PerTokenLoss
    default_agg_mode: str


POLICY_LOSSES: dict[str, PolicyLossKind] = {}


def _register(name: str, default_agg_mode: str) -> Callable[[PerTokenLoss], PerTokenLoss]:
    def add(fn: PerTokenLoss) -> PerTokenLoss:
        POLICY_LOSSES[name] = PolicyLossKind(fn, default_agg_mode)
        return fn

    return add


def policy_loss(
    kind: str,
    log_probs: torch.Tensor,
    old_log_probs: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    *,
    loss_agg_mode: str | None = None,
    global_token_count: float | torch.Tensor | None = None,
    global_seq_count: float | torch.Tensor | None = None,
    loss_scale_factor: float | None = None,
    **options: Any,
) -> tuple[torch.Tensor, Metrics]:
    """Policy loss ``(loss, metrics)`` for ``kind`` in ``ppo``, ``clip_cov``, ``gspo``, ``cispo``, ``sapo``.

    ``log_probs``, ``old_log_probs``, ``response_mask``: ``[B, L]``; ``advantages``: ``[B, L]`` or
    ``[B]`` (broadcast over tokens). ``loss_agg_mode`` defaults to the kind's reference mode
    (``token-mean`` for ppo/clip_cov/cispo, ``seq-mean-token-mean`` for gspo/sapo); ``global_token_count``,
    ``global_seq_count`` and ``loss_scale_factor`` go to ``aggregate_loss``. Other ``options`` are
    the kind's (clip ratios, taus); an unknown one is a ValueError.
    """
    spec = POLICY_LOSSES.get(kind)
    if spec is None:
        raise ValueError(f"unknown policy loss {kind!r}; known: {sorted(POLICY_LOSSES)}")
    allowed = [p.name for p in inspect.signature(spec.per_token).parameters.values() if p.kind is p.KEYWORD_ONLY]
    unknown = sorted(set(options) - set(allowed))
    if unknown:
        raise ValueError(
            f"policy loss {kind!r} got unknown option(s) {unknown}; it takes {allowed} and "
            "loss_agg_mode, global_token_count, global_seq_count, loss_scale_factor"
        )
    mode = spec.default_agg_mode if loss_agg_mode is None else loss_agg_mode
    if mode not in AGGREGATION_MODES:
        raise ValueError(f"unknown loss_agg_mode {mode!r}; known: {sorted(AGGREGATION_MODES)}")

    mask = as_bool_mask(response_mask)
    if log_probs.dim() != 2:
        raise ValueError(f"log_probs must be [B, L], got shape {tuple(log_probs.shape)}")
    if not log_probs.is_floating_point():
        raise TypeError(f"log_probs must be a floating-point tensor, got {log_probs.dtype}")
    if isinstance(advantages, torch.Tensor) and advantages.dim() == 1 and advantages.shape[0] == log_probs.shape[0]:
        advantages = advantages[:, None].expand_as(log_probs)
    check_same_shape("log_probs", log_probs, old_log_probs=old_log_probs, advantages=advantages, response_mask=mask)

    # Padding may hold anything (−inf, nan); select valid entries so neither the value nor the
    # gradient can be poisoned by it. Old log-probs and advantages are constants of the update.
    zero = torch.zeros((), dtype=log_probs.dtype, device=log_probs.device)
    log_probs = torch.where(mask, log_probs, zero)
    old = torch.where(mask, old_log_probs.detach().to(log_probs.dtype), zero)
    adv = torch.where(mask, advantages.detach().to(log_probs.dtype), zero)

    per_token, metrics = spec.per_token(log_probs, old, adv, mask, **options)
    loss = aggregate_loss(
        per_token, mask, mode, global_token_count=global_token_count,
        global_seq_count=global_seq_count, loss_scale_factor=loss_scale_factor,
    )
    with torch.no_grad():
        metrics["approx_kl"] = masked_mean(old - log_probs, mask)
        metrics["clipfrac"] = metrics["clipfrac_high"] + metrics["clipfrac_low"]
    return loss, metrics


# ----------------------------------------------------------------------------------------------
# shared pieces


def _token_ratio(log_probs: torch.Tensor, old: torch.Tensor) -> torch.Tensor:
    return torch.exp((log_probs - old).clamp(-_LOG_RATIO_BOUND, _LOG_RATIO_BOUND))


def _fraction(condition: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return masked_mean(condition.to(torch.get_default_dtype()), mask).detach()


def _ratio_stats(ratio: torch.Tensor, mask: torch.Tensor) -> Metrics:
    # Masked reductions, not `ratio[mask]`: boolean indexing sizes its output on the host, which makes
    # a GPU trainer wait for the device on every micro-batch before its backward is even queued.
    with torch.no_grad():
        nan = torch.full((), float("nan"), dtype=ratio.dtype, device=ratio.device)
        inf = torch.full((), float("inf"), dtype=ratio.dtype, device=ratio.device)
        some = mask.any()
        return {
            "ratio_mean": masked_mean(ratio, mask),
            "ratio_min": torch.where(some, torch.where(mask, ratio, inf).amin(), nan),
            "ratio_max": torch.where(some, torch.where(mask, ratio, -inf).amax(), nan),
        }


def _check_clip(clip_ratio_low: float | None, clip_ratio_high: float) -> None:
    if clip_ratio_low is not None and not clip_ratio_low >= 0:
        raise ValueError(f"clip_ratio_low must be >= 0, got {clip_ratio_low!r}")
    if not clip_ratio_high >= 0:
        raise ValueError(f"clip_ratio_high must be >= 0, got {clip_ratio_high!r}")


def _clipped_surrogate(
    ratio: torch.Tensor,
    adv: torch.Tensor,
    mask: torch.Tensor,
    clip_ratio_low: float,
    clip_ratio_high: float,
    clip_ratio_dual: float | None,
) -> tuple[torch.Tensor, Metrics]:
    """``max(−A·r, −A·clip(r, 1−ε_low, 1+ε_high))``, then for ``A < 0`` ``min(·, −A·c)`` (dual clip)."""
    _check_clip(clip_ratio_low, clip_ratio_high)
    low, high = 1.0 - clip_ratio_low, 1.0 + clip_ratio_high
    unclipped = -adv * ratio
    clipped = torch.maximum(unclipped, -adv * ratio.clamp(low, high))
    metrics = {
        "clipfrac_high": _fraction((adv > 0) & (ratio > high), mask),
        "clipfrac_low": _fraction((adv < 0) & (ratio < low), mask),
    }
    if clip_ratio_dual is None:
        metrics["clipfrac_dual"] = _fraction(torch.zeros_like(mask), mask)
        return clipped, metrics
    if not clip_ratio_dual > 1.0:
        raise ValueError(f"clip_ratio_dual must be > 1 (or None to disable), got {clip_ratio_dual!r}")
    cap = -adv * clip_ratio_dual
    negative = adv < 0
    metrics["clipfrac_dual"] = _fraction(negative & (clipped > cap), mask)
    return torch.where(negative, torch.minimum(clipped, cap), clipped), metrics


# ----------------------------------------------------------------------------------------------
# losses


@_register("ppo", default_agg_mode="token-mean")
def ppo(
    log_probs: torch.Tensor,
    old: torch.Tensor,
    adv: torch.Tensor,
    mask: torch.Tensor,
    *,
    clip_ratio_low: float = 0.2,
    clip_ratio_high: float = 0.3,
    clip_ratio_dual: float | None = 3.0,
) -> tuple[torch.Tensor, Metrics]:
    """PPO clipped surrogate per token; asymmetric clip range (DAPO clip-higher) and dual clip.

    Defaults are EasyR1's (0.2 / 0.3 / 3.0); DAPO uses 0.2 / 0.28.
    """
    ratio = _token_ratio(log_probs, old)
    loss, metrics = _clipped_surrogate(ratio, adv, mask, clip_ratio_low, clip_ratio_high, clip_ratio_dual)
    return loss, metrics | _ratio_stats(ratio, mask)


@_register("clip_cov", default_agg_mode="token-mean")
def clip_cov(
    log_probs: torch.Tensor,
    old: torch.Tensor,
    adv: torch.Tensor,
    mask: torch.Tensor,
    *,
    clip_ratio_low: float = 0.2,
    clip_ratio_high: float = 0.3,
    clip_ratio_dual: float | None = 3.0,
    clip_cov_ratio: float = 2e-4,
    clip_cov_lb: float = 1.0,
    clip_cov_ub: float = 5.0,
    clip_cov_seed: int = 0,
) -> tuple[torch.Tensor, Metrics]:
    """Clip-Cov (Cui et al. 2025, "The Entropy Mechanism of Reinforcement Learning for Reasoning
    Language Models"): PPO's clipped surrogate, with the gradient of a few high-covariance tokens removed.

    Entropy falls when the tokens the policy already favours get positive advantages: the change of
    entropy follows ``−Cov(log π, A)``. Per token, ``cov = (A − mean A)·(log_probs − mean log_probs)``,
    the means over the valid tokens of this call (verl: of its micro-batch). Among the valid tokens
    whose PPO clip leaves the gradient in place and whose ``cov`` lies strictly inside
    ``(clip_cov_lb, clip_cov_ub)``, ``k = max(1, ⌊clip_cov_ratio · valid tokens⌋)`` (``0`` when
    ``clip_cov_ratio`` is 0; at most the candidates) are drawn uniformly at random, and their loss is
    set to 0, so they carry no gradient; every other token keeps PPO's exact loss and gradient.
    ``clip_cov_ratio=0`` is PPO. The draw comes from a CPU generator seeded with ``clip_cov_seed``, so
    a seed gives the same tokens on every machine (the trainer derives one per micro-batch from the
    run seed and the step).

    It works on-policy: the choice needs only advantages and log-probs, not a ratio away from 1, so
    with one mini-batch and one epoch (ratio exactly 1, where clip-higher, the dual clip and GSPO's
    clip change nothing) it still acts. Defaults are verl's (``clip_cov_ratio`` 2e-4, band (1, 5));
    the clip ranges are PPO's here.
    """
    if not 0.0 <= clip_cov_ratio <= 1.0:
        raise ValueError(f"clip_cov_ratio must be in [0, 1], got {clip_cov_ratio!r}")
    if not clip_cov_lb < clip_cov_ub:
        raise ValueError(f"clip_cov_lb must be below clip_cov_ub, got {clip_cov_lb!r} and {clip_cov_ub!r}")
    ratio = _token_ratio(log_probs, old)
    loss, metrics = _clipped_surrogate(ratio, adv, mask, clip_ratio_low, clip_ratio_high, clip_ratio_dual)
    chosen, candidates = _covariance_tokens(log_probs.detach(), adv, mask, loss.detach() != (-adv * ratio).detach(),
                                            clip_cov_ratio, clip_cov_lb, clip_cov_ub, clip_cov_seed)
    loss = torch.where(chosen, torch.zeros_like(loss), loss)
    metrics["clipcov_frac"] = _fraction(chosen, mask)
    metrics["clipcov_candidate_frac"] = _fraction(candidates, mask)
    return loss, metrics | _ratio_stats(ratio, mask)


def _covariance_tokens(
    log_probs: torch.Tensor,
    adv: torch.Tensor,
    mask: torch.Tensor,
    clipped: torch.Tensor,
    ratio: float,
    low: float,
    high: float,
    seed: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(the tokens Clip-Cov removes, its candidates), both bool ``[B, L]`` (see ``clip_cov``).

    The draw ranks the candidates by uniform keys from a seeded CPU generator: the ``k`` largest keys
    are a uniform sample without replacement. ``k`` needs two host reads (valid and candidate counts).
    """
    centred_adv = adv - masked_mean(adv, mask)
    centred_logp = log_probs - masked_mean(log_probs, mask)
    cov = centred_adv * centred_logp
    candidates = mask & ~clipped & (cov > low) & (cov < high)
    valid, available = int(mask.sum()), int(candidates.sum())
    count = min(available, max(1, int(ratio * valid))) if ratio > 0 and valid else 0
    chosen = torch.zeros_like(mask)
    if count:
        generator = torch.Generator().manual_seed(int(seed))
        keys = torch.rand(mask.shape, generator=generator, dtype=torch.float64).to(mask.device)
        keys = torch.where(candidates, keys, torch.full_like(keys, -1.0))
        picked = keys.flatten().topk(count).indices
        chosen = chosen.flatten().index_fill(0, picked, True).view_as(mask)
    return chosen, candidates


@_register("gspo", default_agg_mode="seq-mean-token-mean")
def gspo(
    log_probs: torch.Tensor,
    old: torch.Tensor,
    adv: torch.Tensor,
    mask: torch.Tensor,
    *,
    clip_ratio_low: float = 3e-4,
    clip_ratio_high: float = 4e-4,
) -> tuple[torch.Tensor, Metrics]:
    """GSPO: one ratio per sequence, ``s_i = exp(masked mean_t (log_probs − old))``, clipped; no dual clip.

    Implemented as verl's token form ``log s_it = sg(log s_i) + log_probs − sg(log_probs)``: the
    same value on every valid token, gradient ``s_i·∇log_probs[i,t]`` per token (equal to the
    sequence form's gradient for a per-sequence advantage and ``seq-mean-token-mean``), and it
    accepts per-token advantages. ``log s`` is capped at 10 as in verl.
    """
    sequence_log_ratio = masked_mean(log_probs - old, mask, dim=-1).detach()
    log_ratio = sequence_log_ratio[:, None] + log_probs - log_probs.detach()
    ratio = torch.exp(log_ratio.clamp(max=_GSPO_MAX_LOG_RATIO))
    loss, metrics = _clipped_surrogate(ratio, adv, mask, clip_ratio_low, clip_ratio_high, None)
    return loss, metrics | _ratio_stats(ratio, mask)


@_register("cispo", default_agg_mode="token-mean")
def cispo(
    log_probs: torch.Tensor,
    old: torch.Tensor,
    adv: torch.Tensor,
    mask: torch.Tensor,
    *,
    clip_ratio_low: float | None = None,
    clip_ratio_high: float = 4.0,
) -> tuple[torch.Tensor, Metrics]:
    """CISPO: ``−sg(w)·A·log_probs`` with ``w = min(r, 1 + clip_ratio_high)`` (and ``≥ 1 − clip_ratio_low``
    only when that option is given). No token is dropped from the gradient: ``∇ = −w·A·∇log_probs``.

    The default upper bound 5 (``clip_ratio_high=4``) is EasyR1's CISPO example's and TRL's
    recommended ``epsilon_high=5``; MiniMax-M1 uses no lower bound. EasyR1's example also sets
    ``clip_ratio_low=0``, which raises every ratio below 1 up to 1 — here that needs to be asked for.
    """
    _check_clip(clip_ratio_low, clip_ratio_high)
    ratio = _token_ratio(log_probs, old)
    upper = 1.0 + clip_ratio_high
    weight = ratio.clamp(max=upper)
    metrics = {"clipfrac_high": _fraction(ratio > upper, mask)}
    if clip_ratio_low is None:
        metrics["clipfrac_low"] = _fraction(torch.zeros_like(mask), mask)
    else:
        lower = 1.0 - clip_ratio_low
        weight = weight.clamp(min=lower)
        metrics["clipfrac_low"] = _fraction(ratio < lower, mask)
    metrics["clipfrac_dual"] = _fraction(torch.zeros_like(mask), mask)
    loss = -weight.detach() * adv * log_probs
    return loss, metrics | _ratio_stats(ratio, mask)


@_register("sapo", default_agg_mode="seq-mean-token-mean")
def sapo(
    log_probs: torch.Tensor,
    old: torch.Tensor,
    adv: torch.Tensor,
    mask: torch.Tensor,
    *,
    tau_positive: float = 1.0,
    tau_negative: float = 1.05,
) -> tuple[torch.Tensor, Metrics]:
    """SAPO: soft gate instead of a hard clip, ``−A·(4/τ)·sigmoid(τ·(r − 1))``.

    ``τ = tau_positive`` where ``A > 0``, else ``tau_negative``. At ``r = 1`` the gate's value is
    ``2/τ`` and its slope 1, so near on-policy the gradient matches the unclipped surrogate's.
    """
    if not (tau_positive > 0 and tau_negative > 0):
        raise ValueError(f"tau_positive and tau_negative must be > 0, got {tau_positive!r}, {tau_negative!r}")
    ratio = _token_ratio(log_probs, old)
    tau = torch.where(adv > 0, torch.full_like(ratio, tau_positive), torch.full_like(ratio, tau_negative))
    gate = torch.sigmoid(tau * (ratio - 1.0)) * (4.0 / tau)
    never = _fraction(torch.zeros_like(mask), mask)
    metrics = {"clipfrac_high": never, "clipfrac_low": never, "clipfrac_dual": never}
    return -adv * gate, metrics | _ratio_stats(ratio, mask)
