"""Importance correction between the policy that generated a batch and the one the trainer scores.

The rollout engine's log-probs (π_rollout: vLLM's kernels, bf16, another batch shape, or an older
policy version) differ from the trainer's (π_old) even for the same weights. Each token's policy
gradient is then an off-policy estimate, and the ratio π_old / π_rollout corrects it:

* `truncate` (TIS, Yao et al. 2025, "Your efficient RL framework secretly brings you off-policy RL
  training"): weight = min(ratio, threshold);
* `mask` (masked importance sampling): weight = ratio where ratio ≤ threshold, else 0 (the token,
  or the whole sequence at `level="sequence"`, is dropped from the gradient).

At `level="sequence"` the ratio is the product over the response's tokens (one weight per
response). The weights are detached multipliers of the advantages: for every surrogate of the form
max(-A·r, -A·clip(r)) a non-negative weight w gives the same loss as weighting the token's loss by w.
`gap_metrics` are what users watch on every step: how far the two engines' numerics are apart.
"""

from __future__ import annotations

import torch

from evr1.rl.masked import masked_mean

LEVELS = ("token", "sequence")
MODES = ("truncate", "mask")
_MAX_LOG_RATIO = 20.0  # exp(20) ≈ 5e8: far above any threshold, and no overflow to inf


def importance_weights(old_log_probs: torch.Tensor, rollout_log_probs: torch.Tensor, mask: torch.Tensor, *,
                       level: str = "token", mode: str = "truncate", threshold: float = 2.0
                       ) -> tuple[torch.Tensor, dict[str, float]]:
    """Per-token weights [B, L] (0 off `mask`) and their statistics.

    `old_log_probs` and `rollout_log_probs` are the sampled tokens' log-probs under the trainer and
    under the rollout engine, [B, L]; `mask` marks valid response tokens."""
    if level not in LEVELS:
        raise ValueError(f"rollout correction: level {level!r} is not one of {LEVELS}")
    if mode not in MODES:
        raise ValueError(f"rollout correction: mode {mode!r} is not one of {MODES}")
    if not threshold > 1.0:
        raise ValueError(f"rollout correction: threshold must be > 1, got {threshold}")
    mask = mask.to(old_log_probs.dtype)
    log_ratio = ((old_log_probs - rollout_log_probs) * mask).detach()
    if level == "sequence":
        log_ratio = log_ratio.sum(dim=-1, keepdim=True).expand_as(mask)
    ratio = torch.exp(log_ratio.clamp(max=_MAX_LOG_RATIO))
    over = ratio > threshold
    weights = ratio.clamp(max=threshold) if mode == "truncate" else torch.where(over, torch.zeros_like(ratio), ratio)
    weights = weights * mask
    valid = mask.bool()
    stats = {
        "rollout/is_weight_mean": float(masked_mean(weights, mask)),
        "rollout/is_weight_max": float(weights[valid].max()) if valid.any() else 0.0,
        ("rollout/is_truncated_frac" if mode == "truncate" else "rollout/is_rejected_frac"):
            float(masked_mean(over.to(mask.dtype), mask)),
    }
    return weights, stats


def gap_metrics(old_log_probs: torch.Tensor, rollout_log_probs: torch.Tensor, mask: torch.Tensor) -> dict[str, float]:
    """How far the rollout engine's log-probs are from the trainer's on the sampled tokens: the mean
    and largest |Δ log-prob|, and the mean KL estimate k1 = E[log π_rollout − log π_old] under the
    rollout's samples."""
    mask = mask.to(old_log_probs.dtype)
    diff = (rollout_log_probs - old_log_probs) * mask
    valid = mask.bool()
    return {
        "rollout/logprob_gap_mean": float(masked_mean(diff.abs(), mask)),
        "rollout/logprob_gap_max": float(diff.abs()[valid].max()) if valid.any() else 0.0,
        "rollout/kl_rollout_old": float(masked_mean(diff, mask)),
        # k3 = e^r − 1 − r with r = log π_old − log π_rollout: the same KL, never negative, lower variance
        "rollout/kl_k3_rollout_old": float(masked_mean(torch.expm1(-diff) + diff, mask)),
    }
