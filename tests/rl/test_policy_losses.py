"""Policy losses against values worked out by hand from the per-token formulas (docs/rl.md §Policy
losses), gradients against hand-derived or independently autograd-ed expressions, and hypothesis
properties of the clipped objective."""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from evr1.rl import policy_loss

# PPO case: four valid tokens and one padding token; ratios and advantages picked so that each branch
# of the clipped objective is hit once (EasyR1 defaults ε_low 0.2, ε_high 0.3, dual clip c = 3):
#   A=+1, r=1.5 → max(−1.5, −1.3) = −1.3   (clipped high, no gradient)
#   A=+1, r=0.5 → max(−0.5, −0.8) = −0.5   (unclipped, ∂/∂logp = −A·r = −0.5)
#   A=−1, r=0.5 → max( 0.5,  0.8) =  0.8   (clipped low, no gradient)
#   A=−1, r=5   → max( 5.0,  1.3) =  5 → dual clip min(5, 3) = 3 (no gradient)
RATIOS = [1.5, 0.5, 0.5, 5.0, 1.0]
ADVANTAGES = [1.0, 1.0, -1.0, -1.0, 0.0]
OLD = [-1.0, -2.0, -0.5, -3.0, -0.7]
MASK = torch.tensor([[1, 1, 1, 1, 0]])


def make(dtype, ratios=RATIOS, old=OLD, advantages=ADVANTAGES):
    old_t = torch.tensor([old], dtype=dtype, requires_grad=True)
    log_probs = (old_t.detach() + torch.log(torch.tensor([ratios], dtype=dtype))).requires_grad_(True)
    adv = torch.tensor([advantages], dtype=dtype, requires_grad=True)
    return log_probs, old_t, adv


def test_ppo_value_metrics_and_gradient(dtype, tol):
    log_probs, old, adv = make(dtype)
    loss, metrics = policy_loss("ppo", log_probs, old, adv, MASK)
    torch.testing.assert_close(loss, torch.tensor((-1.3 - 0.5 + 0.8 + 3.0) / 4, dtype=dtype), **tol)
    loss.backward()
    torch.testing.assert_close(log_probs.grad, torch.tensor([[0.0, -0.5 / 4, 0.0, 0.0, 0.0]], dtype=dtype), **tol)
    assert old.grad is None and adv.grad is None  # constants of the update
    assert {k: round(float(v), 6) for k, v in metrics.items() if k.startswith("clipfrac")} == {
        "clipfrac_high": 0.25, "clipfrac_low": 0.25, "clipfrac_dual": 0.25, "clipfrac": 0.5,
    }
    assert metrics["ratio_min"].item() == pytest.approx(0.5) and metrics["ratio_max"].item() == pytest.approx(5.0)
    assert metrics["ratio_mean"].item() == pytest.approx((1.5 + 0.5 + 0.5 + 5.0) / 4)
    # approx_kl = mean(old − logp) = −mean(log r) over the valid tokens
    assert metrics["approx_kl"].item() == pytest.approx(-sum(math.log(r) for r in RATIOS[:4]) / 4)
    assert all(v.dim() == 0 and not v.requires_grad for v in metrics.values())


def test_ppo_without_dual_clip_and_with_clip_higher(dtype, tol):
    log_probs, old, adv = make(dtype)
    loss, metrics = policy_loss("ppo", log_probs, old, adv, MASK, clip_ratio_dual=None, clip_ratio_high=0.28)
    # first token now clips at 1.28; the last keeps its unclipped 5 and its gradient −A·r = 5
    torch.testing.assert_close(loss, torch.tensor((-1.28 - 0.5 + 0.8 + 5.0) / 4, dtype=dtype), **tol)
    loss.backward()
    torch.testing.assert_close(log_probs.grad, torch.tensor([[0.0, -0.5, 0.0, 5.0, 0.0]], dtype=dtype) / 4, **tol)
    assert metrics["clipfrac_dual"].item() == 0.0


def test_padding_garbage_cannot_poison_loss_or_gradient(dtype):
    log_probs, old, adv = make(dtype)
    with torch.no_grad():
        log_probs[0, 4] = float("nan")
        old[0, 4] = float("-inf")
    for kind in ("ppo", "gspo", "cispo", "sapo"):
        log_probs.grad = None
        loss, _ = policy_loss(kind, log_probs, old, adv, MASK)
        loss.backward()
        assert torch.isfinite(loss) and torch.isfinite(log_probs.grad).all(), kind
        assert log_probs.grad[0, 4] == 0, kind


def test_gspo_sequence_ratio_value_and_gradient(dtype, tol):
    # seq 0: token log-ratios 0.1, 0.3 → s0 = e^0.2, A = +1; seq 1: one token, log-ratio −0.2 → s1 = e^−0.2, A = −1
    old = torch.tensor([[-1.0, -2.0], [-0.5, -4.0]], dtype=dtype)
    log_probs = (old + torch.tensor([[0.1, 0.3], [-0.2, 0.0]], dtype=dtype)).requires_grad_(True)
    adv = torch.tensor([1.0, -1.0], dtype=dtype)  # one advantage per sequence is broadcast
    mask = torch.tensor([[1, 1], [1, 0]])
    s0, s1 = math.exp(0.2), math.exp(-0.2)

    # default ranges (3e-4 / 4e-4) clip both sequences: −min(s0, 1.0004) and +max(s1, 0.9997)
    loss, metrics = policy_loss("gspo", log_probs, old, adv, mask)
    torch.testing.assert_close(loss, torch.tensor((-(1 + 4e-4) + (1 - 3e-4)) / 2, dtype=dtype), **tol)
    assert metrics["clipfrac_high"].item() == pytest.approx(2 / 3)
    assert metrics["clipfrac_low"].item() == pytest.approx(1 / 3)

    # wide range: unclipped, value (−s0 + s1)/2; the gradient equals that of the sequence-level form
    # exp(masked mean of the log-ratios), differentiated by autograd independently of our token form.
    loss, _ = policy_loss("gspo", log_probs, old, adv, mask, clip_ratio_low=0.5, clip_ratio_high=0.5)
    torch.testing.assert_close(loss, torch.tensor((-s0 + s1) / 2, dtype=dtype), **tol)
    (grad,) = torch.autograd.grad(loss, log_probs)
    reference_lp = log_probs.detach().clone().requires_grad_(True)
    seq_ratio = torch.exp(((reference_lp - old) * mask).sum(-1) / mask.sum(-1))
    (expected,) = torch.autograd.grad((-adv * seq_ratio).mean(), reference_lp)
    torch.testing.assert_close(grad, expected * mask, **tol)


def test_cispo_value_stop_gradient_and_bounds(dtype, tol):
    # r = 2, 0.5, 10 with A = +1, −1, +1: w = min(r, 5) = 2, 0.5, 5 → ℓ = −w·A·logp
    old = torch.tensor([[-1.0, -2.0, -3.0]], dtype=dtype)
    log_probs = (old + torch.log(torch.tensor([[2.0, 0.5, 10.0]], dtype=dtype))).requires_grad_(True)
    adv = torch.tensor([[1.0, -1.0, 1.0]], dtype=dtype)
    mask = torch.ones(1, 3)
    lp = log_probs.detach()
    loss, metrics = policy_loss("cispo", log_probs, old, adv, mask)
    expected = -(2 * lp[0, 0] - 0.5 * lp[0, 1] + 5 * lp[0, 2]) / 3
    torch.testing.assert_close(loss, expected, **tol)
    loss.backward()
    # stop-gradient on w: ∂ℓ/∂logp = −w·A (no r' term), every token keeps a gradient
    torch.testing.assert_close(log_probs.grad, torch.tensor([[-2.0, 0.5, -5.0]], dtype=dtype) / 3, **tol)
    assert metrics["clipfrac_high"].item() == pytest.approx(1 / 3) and metrics["clipfrac_low"].item() == 0

    # a lower bound only when asked: 1 − 0.2 raises w of the second token from 0.5 to 0.8
    log_probs.grad = None
    loss, metrics = policy_loss("cispo", log_probs, old, adv, mask, clip_ratio_low=0.2, clip_ratio_high=0.2)
    loss.backward()
    torch.testing.assert_close(log_probs.grad, torch.tensor([[-1.2, 0.8, -1.2]], dtype=dtype) / 3, **tol)
    assert metrics["clipfrac_low"].item() == pytest.approx(1 / 3)


def test_sapo_soft_gate_value_and_gradient(dtype, tol):
    # r = 1 (A = +1, τ = 1): gate 4·σ(0) = 2 → ℓ = −2; r = 1.5 (A = −2, τ = 1.05): ℓ = 2·(4/1.05)·σ(0.525)
    old = torch.tensor([[-1.0, -1.0]], dtype=dtype)
    log_probs = (old + torch.log(torch.tensor([[1.0, 1.5]], dtype=dtype))).requires_grad_(True)
    adv = torch.tensor([[1.0, -2.0]], dtype=dtype)
    sig = 1 / (1 + math.exp(-0.525))
    loss, _ = policy_loss("sapo", log_probs, old, adv, torch.ones(1, 2))
    torch.testing.assert_close(loss, torch.tensor((-2.0 + 2 * (4 / 1.05) * sig) / 2, dtype=dtype), **tol)
    loss.backward()
    # ∂ℓ/∂logp = −A·4·σ(1−σ)·r: token 0 → −1·4·¼·1 = −1; token 1 → 2·4·σ(1−σ)·1.5
    expected = torch.tensor([[-1.0, 2 * 4 * sig * (1 - sig) * 1.5]], dtype=dtype) / 2
    torch.testing.assert_close(log_probs.grad, expected, **tol)


def test_aggregation_options_pass_through(dtype, tol):
    log_probs, old, adv = make(dtype)
    per_token = torch.tensor([-1.3, -0.5, 0.8, 3.0], dtype=dtype)
    cases = {
        ("token-mean", None): per_token.sum() / 4,
        ("seq-mean-token-sum", None): per_token.sum(),
        ("seq-mean-token-sum-norm", None): per_token.sum() / 5,  # verl: C = padded length 5
        ("seq-mean-token-sum-norm", 2.0): per_token.sum() / 2,
    }
    for (mode, scale), expected in cases.items():
        loss, _ = policy_loss("ppo", log_probs, old, adv, MASK, loss_agg_mode=mode, loss_scale_factor=scale)
        torch.testing.assert_close(loss, expected, **tol)
    loss, _ = policy_loss("ppo", log_probs, old, adv, MASK, global_token_count=8)
    torch.testing.assert_close(loss, per_token.sum() / 8, **tol)


def test_errors_name_the_problem():
    log_probs, old, adv = make(torch.float32)
    with pytest.raises(ValueError, match="unknown policy loss 'grpo'.*'ppo'"):
        policy_loss("grpo", log_probs, old, adv, MASK)
    with pytest.raises(ValueError, match=r"unknown option\(s\) \['tau_positive'\]"):
        policy_loss("ppo", log_probs, old, adv, MASK, tau_positive=1.0)
    with pytest.raises(ValueError, match="unknown loss_agg_mode 'token'"):
        policy_loss("ppo", log_probs, old, adv, MASK, loss_agg_mode="token")
    with pytest.raises(ValueError, match="old_log_probs has shape"):
        policy_loss("ppo", log_probs, old[:, :3], adv, MASK)
    with pytest.raises(ValueError, match="clip_ratio_dual must be > 1"):
        policy_loss("ppo", log_probs, old, adv, MASK, clip_ratio_dual=0.5)


finite = st.floats(-3, 3, allow_nan=False)


@settings(max_examples=60, deadline=None)
@given(
    tokens=st.lists(st.tuples(finite, st.floats(-5, 5, allow_nan=False)), min_size=1, max_size=8),
    low=st.floats(0, 0.9),
    high=st.floats(0, 2),
)
def test_clipped_objective_never_exceeds_unclipped(tokens, low, high):
    # objective = −loss; per token the PPO objective min(A·r, A·clip(r)) ≤ A·r (checked per token via
    # one-token batches, then for the token-mean of the whole batch).
    log_ratio = torch.tensor([[t[0] for t in tokens]], dtype=torch.float64)
    adv = torch.tensor([[t[1] for t in tokens]], dtype=torch.float64)
    old = torch.zeros_like(log_ratio)
    mask = torch.ones_like(log_ratio)
    unclipped = adv * torch.exp(log_ratio)
    options = {"clip_ratio_low": low, "clip_ratio_high": high, "clip_ratio_dual": None}
    for t in range(len(tokens)):
        one = slice(t, t + 1)
        loss, _ = policy_loss("ppo", log_ratio[:, one], old[:, one], adv[:, one], mask[:, one], **options)
        assert -loss.item() <= unclipped[0, t].item() + 1e-12
    loss, _ = policy_loss("ppo", log_ratio, old, adv, mask, **options)
    assert -loss.item() <= unclipped.mean().item() + 1e-12
    # the dual clip only ever lowers the loss of negative-advantage tokens, to at most −A·c
    dual, _ = policy_loss("ppo", log_ratio, old, adv, mask, **(options | {"clip_ratio_dual": 3.0}))
    assert dual.item() <= loss.item() + 1e-12
