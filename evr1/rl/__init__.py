"""Pure tensor math for RL post-training: advantage estimators, policy losses, loss aggregation,
KL penalties and controllers, entropy, and DAPO's batch-shaping helpers. Depends on torch only.

See docs/rl.md for the formulas, the config keys that select each piece, and how EasyR1 / verl /
TRL option names map onto ours.
"""

from evr1.rl.advantages import ADVANTAGE_ESTIMATORS, compute_advantages, register_estimator, scores_to_token_rewards
from evr1.rl.aggregation import AGGREGATION_MODES, aggregate_loss
from evr1.rl.correction import gap_metrics, importance_weights
from evr1.rl.dapo import dynamic_sampling_keep, overlong_penalty
from evr1.rl.entropy import AdaptiveEntropyCoefficient, entropy_from_logits, high_entropy_mask
from evr1.rl.kl import (
    KL_ESTIMATORS,
    AdaptiveKLController,
    FixedKLController,
    apply_kl_in_reward,
    kl_loss,
    kl_penalty,
)
from evr1.rl.masked import masked_mean, masked_whiten
from evr1.rl.policy_losses import POLICY_LOSSES, policy_loss

__all__ = [
    "ADVANTAGE_ESTIMATORS",
    "AGGREGATION_MODES",
    "KL_ESTIMATORS",
    "POLICY_LOSSES",
    "AdaptiveEntropyCoefficient",
    "AdaptiveKLController",
    "FixedKLController",
    "aggregate_loss",
    "apply_kl_in_reward",
    "compute_advantages",
    "dynamic_sampling_keep",
    "entropy_from_logits",
    "gap_metrics",
    "high_entropy_mask",
    "importance_weights",
    "kl_loss",
    "kl_penalty",
    "masked_mean",
    "masked_whiten",
    "overlong_penalty",
    "policy_loss",
    "register_estimator",
    "scores_to_token_rewards",
]
