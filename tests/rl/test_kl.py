"""KL estimators, KL in the reward, the KL loss term and the controllers, against hand values
(formulas: /work/shared/reference/rl-algorithms.md §3)."""

import math

import pytest
import torch

from evr1.rl import AdaptiveKLController, FixedKLController, apply_kl_in_reward, kl_loss, kl_penalty

LOGP = [[-1.0, -2.0]]
REF = [[-1.5, -1.0]]  # d = logp − ref = [0.5, −1.0]
K3 = [math.exp(-0.5) + 0.5 - 1, math.exp(1.0) - 1.0 - 1]  # x = ref − logp = [−0.5, 1]


@pytest.mark.parametrize(
    "kinds, expected",
    [
        (("k1", "kl"), [0.5, -1.0]),
        (("abs",), [0.5, 1.0]),
        (("k2", "mse"), [0.125, 0.5]),
        (("k3", "low_var_kl"), K3),
    ],
)
def test_estimators_and_aliases(kinds, expected, dtype, tol):
    logp, ref = torch.tensor(LOGP, dtype=dtype), torch.tensor(REF, dtype=dtype)
    for kind in kinds:
        torch.testing.assert_close(kl_penalty(logp, ref, kind), torch.tensor([expected], dtype=dtype), **tol)


def test_k3_clamps(dtype):
    # d = −30: x = clamp(30, ±20) = 20 → e^20 − 21, clamped to 10; d = +30: x = −20 → e^−20 + 19 → 10
    logp = torch.tensor([-30.0, 0.0], dtype=dtype)
    ref = torch.tensor([0.0, -30.0], dtype=dtype)
    assert kl_penalty(logp, ref, "k3").tolist() == [10.0, 10.0]


def test_full_kl_over_vocabulary(dtype, tol):
    # KL([½, ½, 0] ‖ [¼, ¾, ε]) = ½ ln 2 + ½ ln(2/3); the zero-probability entry contributes nothing
    p = torch.log(torch.tensor([[0.5, 0.5, 0.0]], dtype=dtype))
    q = torch.log(torch.tensor([[0.25, 0.749, 0.001]], dtype=dtype))
    expected = 0.5 * math.log(0.5 / 0.25) + 0.5 * math.log(0.5 / 0.749)
    torch.testing.assert_close(kl_penalty(p, q, "full"), torch.tensor([expected], dtype=dtype), **tol)


def test_gradients_reach_log_probs_only_and_straight_through(dtype, tol):
    logp = torch.tensor(LOGP, dtype=dtype, requires_grad=True)
    ref = torch.tensor(REF, dtype=dtype, requires_grad=True)
    # k3 gradient w.r.t. logp: d/dlogp (e^x − x − 1) with x = ref − logp → 1 − e^x
    kl_penalty(logp, ref, "k3").sum().backward()
    x = torch.tensor(REF, dtype=dtype) - torch.tensor(LOGP, dtype=dtype)
    torch.testing.assert_close(logp.grad, 1 - torch.exp(x), **tol)
    assert ref.grad is None
    # "k3+": forward k3, gradient of k2 (= d)
    logp.grad = None
    value = kl_penalty(logp, ref, "k3+")
    torch.testing.assert_close(value, torch.tensor([K3], dtype=dtype), **tol)
    value.sum().backward()
    torch.testing.assert_close(logp.grad, torch.tensor([[0.5, -1.0]], dtype=dtype), **tol)


def test_unknown_kind_and_shape_errors():
    with pytest.raises(ValueError, match="unknown KL penalty 'k4'.*'low_var_kl'"):
        kl_penalty(torch.zeros(2), torch.zeros(2), "k4")
    with pytest.raises(ValueError, match="unknown KL penalty 'full\\+'"):
        kl_penalty(torch.zeros(2, 3), torch.zeros(2, 3), "full+")
    with pytest.raises(ValueError, match="ref_log_probs has shape"):
        kl_penalty(torch.zeros(2), torch.zeros(3), "k1")


def test_apply_kl_in_reward(dtype, tol):
    # k1 per token d = old − ref = [[0.5, −1, junk], [2, junk, junk]], β = 0.1
    scores = torch.tensor([[0.0, 1.0, 0.0], [3.0, 0.0, 0.0]], dtype=dtype)
    old = torch.tensor([[-1.0, -2.0, 0.0], [-1.0, 0.0, 0.0]], dtype=dtype)
    ref = torch.tensor([[-1.5, -1.0, -9.0], [-3.0, -9.0, -9.0]], dtype=dtype)
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]])
    rewards, current_kl = apply_kl_in_reward(scores, old, ref, mask, kl_coef=0.1)
    expected = torch.tensor([[-0.05, 1.1, 0.0], [2.8, 0.0, 0.0]], dtype=dtype)
    torch.testing.assert_close(rewards, expected, **tol)
    # per-sequence means: (0.5 − 1)/2 = −0.25 and 2 → mean 0.875
    assert isinstance(current_kl, float) and current_kl == pytest.approx(0.875)
    # k3 with β = 1 on the same tokens; the old log-probs are constants of the step (no graph)
    old.requires_grad_(True)
    rewards, _ = apply_kl_in_reward(scores, old, ref, mask, kl_coef=1.0, kind="low_var_kl")
    assert not rewards.requires_grad
    torch.testing.assert_close(rewards[0, :2], scores[0, :2] - torch.tensor(K3, dtype=dtype), **tol)


def test_kl_loss_aggregates_and_differentiates_log_probs(dtype, tol):
    logp = torch.tensor([[-1.0, -2.0, -5.0]], dtype=dtype, requires_grad=True)
    ref = torch.tensor([[-1.5, -1.0, 7.0]], dtype=dtype, requires_grad=True)
    mask = torch.tensor([[1, 1, 0]])
    loss = kl_loss(logp, ref, mask)
    torch.testing.assert_close(loss, torch.tensor(sum(K3) / 2, dtype=dtype), **tol)
    loss.backward()
    assert ref.grad is None and logp.grad[0, 2] == 0
    summed = kl_loss(logp, ref, mask, kind="k1", loss_agg_mode="seq-mean-token-sum")
    torch.testing.assert_close(summed, torch.tensor(-0.5, dtype=dtype), **tol)


def test_controllers():
    fixed = FixedKLController(0.01)
    fixed.update(5.0, 512)
    assert fixed.value == 0.01
    # e = clip(0.15/0.1 − 1, ±0.2) = 0.2 → β = 0.1·(1 + 0.2·256/10000); then e = −0.2 with KL 0.05
    adaptive = AdaptiveKLController(init_kl_coef=0.1, target_kl=0.1, horizon=10000)
    adaptive.update(0.15, 256)
    assert adaptive.value == pytest.approx(0.1 * 1.00512)
    adaptive.update(0.05, 256)
    assert adaptive.value == pytest.approx(0.1 * 1.00512 * 0.99488)
    adaptive.update(0.1, 256)  # on target: unchanged
    assert adaptive.value == pytest.approx(0.1 * 1.00512 * 0.99488)
    with pytest.raises(ValueError, match="target_kl must be > 0"):
        AdaptiveKLController(0.1, 0.0, 10)
