"""KL regularisation towards the reference policy: per-token estimators, KL in the reward,
KL as a loss term, and the fixed / adaptive coefficient controllers.

``d = log_probs - ref_log_probs`` per sampled token. The reference log-probs never receive a
gradient (they are detached here, so a caller cannot get that wrong).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

from evr1.rl.aggregation import aggregate_loss
from evr1.rl.masked import as_bool_mask, check_same_shape, masked_mean

__all__ = [
    "kl_penalty",
    "KL_ESTIMATORS",
    "apply_kl_in_reward",
    "kl_loss",
    "FixedKLController",
    "AdaptiveKLController",
]

# k3's bounds: the log-ratio is clamped before exp() so it cannot overflow, the result is clamped
# so one extreme token cannot dominate (EasyR1, verl and OpenRLHF use the same numbers).
_K3_LOG_RATIO_BOUND = 20.0
_K3_VALUE_BOUND = 10.0


def _k1(log_probs: torch.Tensor, ref_log_probs: torch.Tensor) -> torch.Tensor:
    return log_probs - ref_log_probs


def _abs(log_probs: torch.Tensor, ref_log_probs: torch.Tensor) -> torch.Tensor:
    return (log_probs - ref_log_probs).abs()


def _k2(log_probs: torch.Tensor, ref_log_probs: torch.Tensor) -> torch.Tensor:
    return 0.5 * (log_probs - ref_log_probs).square()


def _k3(log_probs: torch.Tensor, ref_log_probs: torch.Tensor) -> torch.Tensor:
    x = (ref_log_probs - log_probs).clamp(-_K3_LOG_RATIO_BOUND, _K3_LOG_RATIO_BOUND)
    return (torch.exp(x) - x - 1).clamp(-_K3_VALUE_BOUND, _K3_VALUE_BOUND)


def _full(log_probs: torch.Tensor, ref_log_probs: torch.Tensor) -> torch.Tensor:
    # Inputs are log-distributions over the vocabulary (last dim): Σ_v π_v (log π_v − log π_ref,v).
    # kl_div(input=ref, target=policy, log_target=True) computes exactly that term per entry.
    # Entries with π_v = 0 contribute 0 (kl_div would give 0·(−inf) = nan for a −inf log-prob).
    terms = F.kl_div(ref_log_probs, log_probs, reduction="none", log_target=True)
    return torch.where(log_probs > -torch.inf, terms, torch.zeros_like(terms)).sum(dim=-1)


KL_ESTIMATORS: dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {
    "k1": _k1,
    "kl": _k1,
    "abs": _abs,
    "k2": _k2,
    "mse": _k2,
    "k3": _k3,
    "low_var_kl": _k3,
    "full": _full,
}


def kl_penalty(log_probs: torch.Tensor, ref_log_probs: torch.Tensor, kind: str = "k1") -> torch.Tensor:
    """Per-token KL estimate of ``KL(π || π_ref)`` from log-probs of the sampled tokens.

    ``k1``/``kl``: ``d``; ``abs``: ``|d|``; ``k2``/``mse``: ``d²/2``; ``k3``/``low_var_kl``:
    ``e^x − x − 1`` with ``x = clamp(−d, ±20)``, clamped to ``[−10, 10]``; ``full``: inputs are
    log-probabilities over the vocabulary (last dim), summed over it (output drops that dim).
    A ``+`` suffix (``k1+``, ``k3+``, …) keeps the forward value and takes the gradient of ``k2``
    (straight-through, unbiased KL gradient), which verl documents but fails to dispatch.
    """
    straight_through = kind.endswith("+")
    base = kind[:-1] if straight_through else kind
    estimator = KL_ESTIMATORS.get(base)
    if estimator is None or (straight_through and base == "full"):
        known = sorted(KL_ESTIMATORS) + sorted(f"{k}+" for k in KL_ESTIMATORS if k != "full")
        raise ValueError(f"unknown KL penalty {kind!r}; known: {known}")
    check_same_shape("log_probs", log_probs, ref_log_probs=ref_log_probs)
    ref_log_probs = ref_log_probs.detach()
    value = estimator(log_probs, ref_log_probs)
    if straight_through:
        gradient_carrier = _k2(log_probs, ref_log_probs)
        value = value.detach() + gradient_carrier - gradient_carrier.detach()
    return value


def apply_kl_in_reward(
    token_level_scores: torch.Tensor,
    old_log_probs: torch.Tensor,
    ref_log_probs: torch.Tensor,
    response_mask: torch.Tensor,
    *,
    kl_coef: float,
    kind: str = "k1",
) -> tuple[torch.Tensor, float]:
    """Subtract ``kl_coef · KL(old, ref)`` from every valid token's reward (KL in the reward).

    Uses the log-probs of the policy that generated the batch, so nothing here carries a gradient.
    Returns ``(token_level_rewards, current_kl)``; ``current_kl`` (a python float, fed to the KL
    controller and logged) is the mean over sequences of each sequence's masked mean KL, counting
    only sequences with at least one valid token.
    """
    mask = as_bool_mask(response_mask)
    check_same_shape(
        "response_mask", mask, token_level_scores=token_level_scores, old_log_probs=old_log_probs,
        ref_log_probs=ref_log_probs,
    )
    with torch.no_grad():
        kl = torch.where(mask, kl_penalty(old_log_probs.detach(), ref_log_probs, kind), 0.0)
        rewards = token_level_scores.detach() - kl_coef * kl
        per_sequence = masked_mean(kl, mask, dim=-1)
        current_kl = masked_mean(per_sequence, mask.any(dim=-1)).item()
    return rewards, current_kl


def kl_loss(
    log_probs: torch.Tensor,
    ref_log_probs: torch.Tensor,
    response_mask: torch.Tensor,
    *,
    kind: str = "k3",
    loss_agg_mode: str = "token-mean",
    global_token_count: float | torch.Tensor | None = None,
    global_seq_count: float | torch.Tensor | None = None,
    loss_scale_factor: float | None = None,
) -> torch.Tensor:
    """KL loss term (not yet multiplied by its coefficient), aggregated like the policy loss.

    Gradient flows into ``log_probs`` (the current policy) only. Default estimator ``k3``
    (``low_var_kl``), as in EasyR1's example config and the GRPO paper.
    """
    per_token = kl_penalty(log_probs, ref_log_probs, kind)
    return aggregate_loss(
        per_token, response_mask, loss_agg_mode, global_token_count=global_token_count,
        global_seq_count=global_seq_count, loss_scale_factor=loss_scale_factor,
    )


class FixedKLController:
    """Constant KL coefficient (the default in EasyR1, verl, TRL and OpenRLHF)."""

    def __init__(self, kl_coef: float) -> None:
        if not kl_coef >= 0:
            raise ValueError(f"kl_coef must be >= 0, got {kl_coef!r}")
        self.value = float(kl_coef)

    def update(self, current_kl: float, n_steps: int) -> None:
        """Nothing to adapt; present so both controllers are interchangeable."""


class AdaptiveKLController:
    """Adaptive KL coefficient of Ziegler et al. (2019), as in EasyR1, verl and OpenRLHF.

    ``e = clip(current_kl / target_kl − 1, −0.2, 0.2)``; ``β ← β · (1 + e · n_steps / horizon)``,
    with ``n_steps`` the number of samples in the batch.
    """

    def __init__(self, init_kl_coef: float, target_kl: float, horizon: float) -> None:
        if not init_kl_coef >= 0:
            raise ValueError(f"init_kl_coef must be >= 0, got {init_kl_coef!r}")
        if not target_kl > 0:
            raise ValueError(f"target_kl must be > 0, got {target_kl!r}")
        if not horizon > 0:
            raise ValueError(f"horizon must be > 0, got {horizon!r}")
        self.value = float(init_kl_coef)
        self.target = float(target_kl)
        self.horizon = float(horizon)

    def update(self, current_kl: float, n_steps: int) -> None:
        """Move β towards the value that keeps the observed KL at the target."""
        proportional_error = min(max(float(current_kl) / self.target - 1.0, -0.2), 0.2)
        self.value *= 1.0 + proportional_error * n_steps / self.horizon
