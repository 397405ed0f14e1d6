"""Rollout importance correction: weights, truncation, rejection, and the gradient it gives."""

import math

import pytest
import torch

from evr1 import rl

MASK = torch.tensor([[1.0, 1.0, 1.0, 0.0], [1.0, 1.0, 0.0, 0.0]])


def test_weights_are_one_and_the_loss_unchanged_when_the_engines_agree():
    old = torch.randn(2, 4)
    w, stats = rl.importance_weights(old, old.clone(), MASK)
    assert torch.equal(w, MASK)
    assert stats == {"rollout/is_weight_mean": 1.0, "rollout/is_weight_max": 1.0, "rollout/is_truncated_frac": 0.0}
    adv = torch.randn(2, 4)
    lp = old.clone().requires_grad_(True)
    plain, _ = rl.policy_loss("ppo", lp, old, adv, MASK)
    weighted, _ = rl.policy_loss("ppo", lp, old, adv * w, MASK)
    assert torch.equal(plain, weighted)
    assert rl.gap_metrics(old, old, MASK) == {"rollout/logprob_gap_mean": 0.0, "rollout/logprob_gap_max": 0.0,
                                              "rollout/kl_rollout_old": 0.0, "rollout/kl_k3_rollout_old": 0.0}


def test_token_truncation_and_rejection():
    old = torch.zeros(2, 4)
    # ratios exp(old - rollout): e^1 ≈ 2.72 (above 2), e^0.5 ≈ 1.65, e^-1 ≈ 0.37; padding ignored
    rollout = torch.tensor([[-1.0, -0.5, 1.0, 9.0], [0.0, -1.0, 9.0, 9.0]])
    w, stats = rl.importance_weights(old, rollout, MASK, mode="truncate", threshold=2.0)
    want = torch.tensor([[2.0, math.exp(0.5), math.exp(-1.0), 0.0], [1.0, 2.0, 0.0, 0.0]])
    torch.testing.assert_close(w, want)
    assert stats["rollout/is_truncated_frac"] == pytest.approx(2 / 5) and stats["rollout/is_weight_max"] == 2.0
    w, stats = rl.importance_weights(old, rollout, MASK, mode="mask", threshold=2.0)
    torch.testing.assert_close(w, torch.tensor([[0.0, math.exp(0.5), math.exp(-1.0), 0.0], [1.0, 0.0, 0.0, 0.0]]))
    assert stats["rollout/is_rejected_frac"] == pytest.approx(2 / 5)


def test_sequence_level_uses_the_product_over_the_response():
    old = torch.zeros(2, 4)
    rollout = torch.tensor([[-0.25, -0.25, -0.25, 5.0], [-0.5, -0.5, 0.0, 0.0]])  # ratios e^0.75, e^1.0
    w, _ = rl.importance_weights(old, rollout, MASK, level="sequence", mode="mask", threshold=2.5)
    torch.testing.assert_close(w, torch.tensor([[math.exp(0.75)] * 3 + [0.0], [0.0] * 4]))  # e ≈ 2.72 > 2.5: dropped
    w, _ = rl.importance_weights(old, rollout, MASK, level="sequence", threshold=2.0)
    torch.testing.assert_close(w, torch.tensor([[2.0] * 3 + [0.0], [2.0, 2.0, 0.0, 0.0]]))


def test_the_gradient_equals_the_weighted_formula():
    """Weighted advantages in the PPO loss give the gradient of Σ w·(−A·r)/tokens (no clipping at r = 1)."""
    torch.manual_seed(0)
    old, rollout, adv = torch.randn(2, 4), torch.randn(2, 4), torch.randn(2, 4)
    w, _ = rl.importance_weights(old, rollout, MASK, threshold=1.5)
    lp = old.clone().requires_grad_(True)
    loss, _ = rl.policy_loss("ppo", lp, old, adv * w, MASK, loss_agg_mode="token-mean")
    loss.backward()
    # d/dlp of −A·w·exp(lp − old) at lp = old is −A·w, averaged over the valid tokens
    torch.testing.assert_close(lp.grad, -(adv * w) * MASK / MASK.sum())


def test_the_gap_is_measured_on_valid_tokens_only():
    old = torch.zeros(2, 4)
    rollout = torch.tensor([[0.1, -0.2, 0.0, 50.0], [0.3, 0.0, 50.0, 50.0]])
    m = rl.gap_metrics(old, rollout, MASK)
    assert m["rollout/logprob_gap_max"] == pytest.approx(0.3)
    assert m["rollout/logprob_gap_mean"] == pytest.approx(0.6 / 5)
    assert m["rollout/kl_rollout_old"] == pytest.approx(0.2 / 5)
    # k3 per token: e^r − 1 − r with r = old − rollout, over the valid tokens only
    k3 = sum(math.expm1(-d) + d for d in (0.1, -0.2, 0.0, 0.3, 0.0)) / 5
    assert m["rollout/kl_k3_rollout_old"] == pytest.approx(k3) and k3 > 0


@pytest.mark.parametrize("bad", [dict(level="batch"), dict(mode="clip"), dict(threshold=1.0)])
def test_bad_options_are_refused(bad):
    with pytest.raises(ValueError, match="rollout correction"):
        rl.importance_weights(torch.zeros(1, 1), torch.zeros(1, 1), torch.ones(1, 1), **bad)
