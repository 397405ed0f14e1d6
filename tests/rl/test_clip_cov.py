"""Clip-Cov (`policy_loss("clip_cov", ...)`) against a case worked out by hand: which tokens are
candidates, how many are drawn, that the drawn ones carry no gradient and every other token PPO's
exact one, that the draw is reproducible from its seed, and that ratio 0 is PPO."""

import pytest
import torch

from evr1.config import AlgorithmConfig
from evr1.rl import policy_loss

# Six valid tokens and one padding token, on-policy (old = logp, ratio 1). Means over the valid tokens:
#   A    = [4, 4, −2, −2, −1, 3]          mean 1   → A − mean    = [3, 3, −3, −3, −2, 2]
#   logp = [−1, −4, −2, −4, −4.5, −2.5]   mean −3  → logp − mean = [2, −1, 1, −1, −1.5, 0.5]
#   cov  = [6, −3, −3, 3, 3, 1]
# In the band (1, 5), strictly: tokens 3 and 4 (cov 3). Token 0 (6) is above it, token 5 (1) sits
# on its edge: neither is a candidate.
ADV = [4.0, 4.0, -2.0, -2.0, -1.0, 3.0, 0.0]
LOGP = [-1.0, -4.0, -2.0, -4.0, -4.5, -2.5, float("nan")]
MASK = torch.tensor([[1, 1, 1, 1, 1, 1, 0]])
CANDIDATES = {3, 4}
VALID = 6


def _inputs(dtype, old_shift=None):
    log_probs = torch.tensor([LOGP], dtype=dtype, requires_grad=True)
    old = torch.tensor([LOGP], dtype=dtype)
    if old_shift is not None:
        old = old + torch.tensor([old_shift], dtype=dtype)
    return log_probs, old, torch.tensor([ADV], dtype=dtype)


def _run(dtype, **options):
    log_probs, old, adv = _inputs(dtype, options.pop("old_shift", None))
    loss, metrics = policy_loss("clip_cov", log_probs, old, adv, MASK, **options)
    loss.backward()
    return loss, log_probs.grad[0], metrics


def _zeroed(grad) -> set[int]:
    """The valid tokens without a gradient (every valid token here has A ≠ 0, so PPO would give one)."""
    return {i for i in range(VALID) if grad[i] == 0}


@pytest.mark.parametrize("seed", range(12))
def test_one_candidate_token_loses_its_gradient_and_the_rest_keep_ppo_s(dtype, tol, seed):
    # ratio 0.2 of 6 valid tokens: ⌊1.2⌋ = 1 token
    loss, grad, metrics = _run(dtype, clip_cov_ratio=0.2, clip_cov_seed=seed)
    (chosen,) = _zeroed(grad)
    assert chosen in CANDIDATES
    # On-policy PPO: ℓ = −A·r with r = 1, ∂ℓ/∂logp = −A·r = −A, token-mean over 6 tokens.
    want = torch.tensor([-a / VALID if i != chosen and i < VALID else 0.0 for i, a in enumerate(ADV)], dtype=dtype)
    torch.testing.assert_close(grad, want, **tol)
    torch.testing.assert_close(loss, torch.tensor(sum(-ADV[i] for i in range(VALID) if i != chosen) / VALID,
                                                  dtype=dtype), **tol)
    assert metrics["clipcov_frac"].item() == pytest.approx(1 / VALID)
    assert metrics["clipcov_candidate_frac"].item() == pytest.approx(2 / VALID)
    assert metrics["ratio_mean"].item() == 1.0 and metrics["clipfrac"].item() == 0.0


def test_the_draw_is_reproducible_and_reaches_every_candidate(dtype):
    picks = [_zeroed(_run(dtype, clip_cov_ratio=0.2, clip_cov_seed=s)[1]) for s in range(40)]
    assert picks == [_zeroed(_run(dtype, clip_cov_ratio=0.2, clip_cov_seed=s)[1]) for s in range(40)]
    assert set().union(*picks) == CANDIDATES  # both candidates are drawn for some seed, nothing else ever


@pytest.mark.parametrize("ratio, count", [
    (1e-4, 1),  # ⌊6e-4⌋ = 0, raised to one token (verl's rule: at least one when the ratio is positive)
    (0.2, 1),   # ⌊1.2⌋ = 1
    (0.5, 2),   # ⌊3⌋ = 3, but only two candidates
    (1.0, 2),
])
def test_the_count_is_the_ratio_of_valid_tokens_at_least_one_at_most_the_candidates(dtype, ratio, count):
    _, grad, metrics = _run(dtype, clip_cov_ratio=ratio)
    assert len(_zeroed(grad)) == count and _zeroed(grad) <= CANDIDATES
    assert metrics["clipcov_frac"].item() == pytest.approx(count / VALID)


def test_a_token_the_ppo_clip_already_holds_is_not_a_candidate(dtype, tol):
    # Token 3 (A = −2) made off-policy: old = logp + 1, so r = e^−1 < 1 − 0.2: PPO's clip holds it
    # (no gradient, loss −A·0.8 = 1.6). Its covariance (from logp) is unchanged, yet only token 4 is drawn.
    shift = [0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0]
    loss, grad, metrics = _run(dtype, clip_cov_ratio=1.0, old_shift=shift)
    assert metrics["clipcov_candidate_frac"].item() == pytest.approx(1 / VALID)
    assert metrics["clipcov_frac"].item() == pytest.approx(1 / VALID) and metrics["clipfrac_low"].item() > 0
    want = torch.tensor([-4.0, -4.0, 2.0, 0.0, 0.0, -3.0, 0.0], dtype=dtype) / VALID
    torch.testing.assert_close(grad, want, **tol)
    torch.testing.assert_close(loss, torch.tensor((-4 - 4 + 2 + 1.6 + 0 - 3) / VALID, dtype=dtype), **tol)


def test_ratio_zero_is_ppo_value_gradient_and_metrics(dtype, tol):
    torch.manual_seed(0)
    old = torch.randn(3, 9, dtype=dtype) - 2.0
    log_probs = (old + 0.4 * torch.randn(3, 9, dtype=dtype)).requires_grad_(True)  # off-policy: clips act
    adv = torch.randn(3, 9, dtype=dtype) * 3
    mask = torch.rand(3, 9) > 0.2
    results = {}
    for kind, options in (("ppo", {}), ("clip_cov", {"clip_cov_ratio": 0.0})):
        log_probs.grad = None
        loss, metrics = policy_loss(kind, log_probs, old, adv, mask, clip_ratio_high=0.28, **options)
        loss.backward()
        results[kind] = (loss.detach(), log_probs.grad.clone(), metrics)
    (ppo_loss, ppo_grad, ppo_metrics), (cov_loss, cov_grad, cov_metrics) = results["ppo"], results["clip_cov"]
    assert torch.equal(ppo_loss, cov_loss) and torch.equal(ppo_grad, cov_grad)
    assert cov_metrics.pop("clipcov_frac").item() == 0.0 and cov_metrics.pop("clipcov_candidate_frac").item() > 0
    assert cov_metrics.keys() == ppo_metrics.keys()
    assert all(torch.equal(cov_metrics[k], ppo_metrics[k]) or torch.isnan(ppo_metrics[k]) for k in ppo_metrics)


def test_only_tokens_inside_the_band_are_drawn_on_a_large_batch():
    torch.manual_seed(1)
    log_probs = (torch.randn(16, 40, dtype=torch.float64) * 1.5 - 2.0).requires_grad_(True)
    adv = (torch.randn(16, 1, dtype=torch.float64) * 2).expand(16, 40)
    mask = torch.rand(16, 40) > 0.1
    loss, metrics = policy_loss("clip_cov", log_probs, log_probs.detach(), adv, mask, clip_cov_ratio=0.01,
                                clip_cov_lb=0.5, clip_cov_ub=2.0, clip_cov_seed=7)
    loss.backward()
    m = mask.double()
    cov = (adv - (adv * m).sum() / m.sum()) * (log_probs.detach() - (log_probs.detach() * m).sum() / m.sum())
    band = mask & (cov > 0.5) & (cov < 2.0)
    chosen = mask & (log_probs.grad == 0) & (adv != 0)
    valid = int(mask.sum())
    assert int(chosen.sum()) == min(int(band.sum()), max(1, int(0.01 * valid))) > 1
    assert bool((chosen & ~band).sum() == 0)
    assert metrics["clipcov_frac"].item() == pytest.approx(int(chosen.sum()) / valid)


def test_padding_garbage_cannot_poison_clip_cov(dtype):
    log_probs, old, adv = _inputs(dtype)
    with torch.no_grad():
        old[0, 6] = float("-inf")
    loss, _ = policy_loss("clip_cov", log_probs, old, adv, MASK, clip_cov_ratio=1.0)
    loss.backward()
    assert torch.isfinite(loss) and torch.isfinite(log_probs.grad).all() and log_probs.grad[0, 6] == 0


def test_bad_options_are_refused():
    log_probs, old, adv = _inputs(torch.float64)
    with pytest.raises(ValueError, match="clip_cov_ratio"):
        policy_loss("clip_cov", log_probs, old, adv, MASK, clip_cov_ratio=1.5)
    with pytest.raises(ValueError, match="clip_cov_lb"):
        policy_loss("clip_cov", log_probs, old, adv, MASK, clip_cov_lb=5.0, clip_cov_ub=1.0)
    with pytest.raises(ValueError, match="unknown option"):
        policy_loss("ppo", log_probs, old, adv, MASK, clip_cov_ratio=0.1)


def test_the_config_passes_clip_cov_s_options_and_only_to_it():
    options = AlgorithmConfig(policy_loss="clip_cov", clip_cov_ratio=0.001).loss_options()
    assert options == {"clip_ratio_dual": 3.0, "clip_cov_ratio": 0.001, "clip_cov_lb": 1.0, "clip_cov_ub": 5.0}
    assert "clip_cov_ratio" not in AlgorithmConfig(policy_loss="ppo").loss_options()
    d = AlgorithmConfig()
    assert (d.clip_cov_ratio, d.clip_cov_lb, d.clip_cov_ub) == (2e-4, 1.0, 5.0)
    with pytest.raises(ValueError, match="clip_cov_lb"):
        AlgorithmConfig(policy_loss="clip_cov", clip_cov_lb=5.0, clip_cov_ub=5.0)
