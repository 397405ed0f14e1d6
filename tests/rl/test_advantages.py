"""Advantage estimators against values worked out by hand (formulas in docs/rl.md and
/work/shared/reference/rl-algorithms.md §1), plus hypothesis properties of GRPO."""

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from evr1.rl import compute_advantages, scores_to_token_rewards

# lengths 2, 3, 1, 3 in a padded length of 3
MASK = torch.tensor([[1, 1, 0], [1, 1, 1], [1, 0, 0], [1, 1, 1]])


def expand(per_response, dtype, mask=MASK):
    """What every estimator of outcome rewards must produce: a_i on valid tokens, 0 on padding."""
    return torch.tensor(per_response, dtype=dtype)[:, None] * mask.to(dtype)


# ---------------------------------------------------------------------------------------------- GRPO


def test_grpo_sample_std_one_group(dtype, tol):
    # [1,0,0,1]: mean 0.5, sample std sqrt(1/3) = 0.57735 → ±0.5 / (0.57735 + 1e-6) ≈ ±0.866
    scores = torch.tensor([1.0, 0.0, 0.0, 1.0], dtype=dtype)
    a = 0.5 / (math.sqrt(1 / 3) + 1e-6)
    advantages, returns = compute_advantages("grpo", scores, ["p"] * 4, MASK)
    torch.testing.assert_close(advantages, expand([a, -a, -a, a], dtype), **tol)
    assert returns is advantages
    assert advantages.dtype == dtype


def test_grpo_population_and_no_std(dtype, tol):
    scores = torch.tensor([1.0, 0.0, 0.0, 1.0], dtype=dtype)
    population, _ = compute_advantages("grpo", scores, [7] * 4, MASK, std="population")
    a = 0.5 / (0.5 + 1e-6)  # population std of [1,0,0,1] is 0.5
    torch.testing.assert_close(population, expand([a, -a, -a, a], dtype), **tol)
    dr_grpo, _ = compute_advantages("grpo", scores, [7] * 4, MASK, std="none")
    torch.testing.assert_close(dr_grpo, expand([0.5, -0.5, -0.5, 0.5], dtype), **tol)


def test_grpo_interleaved_groups_any_id_type(dtype, tol):
    # groups by id, not position: responses 0,2 → "x" with scores 3, 1; responses 1,3 → "y" with 2, 2
    scores = torch.tensor([3.0, 2.0, 1.0, 2.0], dtype=dtype)
    a = 1.0 / (math.sqrt(2.0) + 1e-6)  # mean 2, sample std sqrt(2)
    expected = expand([a, 0.0, -a, 0.0], dtype)
    for index in (["x", "y", "x", "y"], np.array(["x", "y", "x", "y"]), np.array([5, 9, 5, 9]), (0, 1, 0, 1)):
        advantages, _ = compute_advantages("grpo", scores, index, MASK)
        torch.testing.assert_close(advantages, expected, **tol)


def test_grpo_single_member_and_constant_groups_are_zero(dtype):
    scores = torch.tensor([0.3, 0.7, 0.7, 0.7], dtype=dtype)
    for std in ("sample", "population", "none"):
        advantages, _ = compute_advantages("grpo", scores, ["alone", "same", "same", "same"], MASK, std=std)
        assert torch.equal(advantages, torch.zeros_like(advantages)), std


def test_grpo_eps_option(dtype, tol):
    scores = torch.tensor([1.0, 0.0], dtype=dtype)
    mask = torch.ones(2, 1)
    advantages, _ = compute_advantages("grpo", scores, [0, 0], mask, eps=1.0)
    a = 0.5 / (math.sqrt(0.5) + 1.0)  # sample std of [1, 0] is sqrt(1/2)
    torch.testing.assert_close(advantages, torch.tensor([[a], [-a]], dtype=dtype), **tol)


def test_token_level_scores_are_summed_over_valid_tokens(dtype, tol):
    # the same rewards spread over tokens (padding holds junk that must be ignored)
    token_scores = torch.tensor(
        [[0.5, 0.5, 9.0], [0.0, 0.0, 0.0], [0.0, 9.0, 9.0], [0.2, 0.3, 0.5]], dtype=dtype
    )
    outcome = torch.tensor([1.0, 0.0, 0.0, 1.0], dtype=dtype)
    from_tokens, _ = compute_advantages("grpo", token_scores, ["p"] * 4, MASK)
    from_outcome, _ = compute_advantages("grpo", outcome, ["p"] * 4, MASK)
    torch.testing.assert_close(from_tokens, from_outcome, **tol)


@settings(max_examples=60, deadline=None)
@given(
    groups=st.lists(
        st.lists(st.floats(-10, 10, allow_nan=False, width=32), min_size=1, max_size=6), min_size=1, max_size=5
    ),
    std=st.sampled_from(["sample", "population", "none"]),
)
def test_grpo_each_group_sums_to_zero(groups, std):
    scores = torch.tensor([s for group in groups for s in group], dtype=torch.float64)
    index = [g for g, group in enumerate(groups) for _ in group]
    mask = torch.ones(len(index), 2)
    advantages, _ = compute_advantages("grpo", scores, index, mask, std=std)
    per_group = torch.zeros(len(groups), dtype=torch.float64).index_add(0, torch.tensor(index), advantages[:, 0])
    # |a_i| ≤ sqrt(k-1) for sample std, so the sum is zero up to rounding of a few terms of size ≤ 10
    torch.testing.assert_close(per_group, torch.zeros_like(per_group), rtol=0, atol=1e-9)


@settings(max_examples=60, deadline=None)
@given(
    value=st.floats(-1e6, 1e6, allow_nan=False),
    size=st.integers(1, 8),
    std=st.sampled_from(["sample", "population", "none"]),
)
def test_grpo_equal_rewards_give_exactly_zero(value, size, std):
    scores = torch.full((size,), value, dtype=torch.float32)
    advantages, _ = compute_advantages("grpo", scores, ["g"] * size, torch.ones(size, 3), std=std)
    assert torch.equal(advantages, torch.zeros_like(advantages))


# ---------------------------------------------------------------------------------------------- RLOO


def test_rloo(dtype, tol):
    # group "a" = [3, 1, 2]: 3 − (1+2)/2 = 1.5, 1 − (3+2)/2 = −1.5, 2 − (3+1)/2 = 0; "b" alone → 0
    scores = torch.tensor([3.0, 1.0, 5.0, 2.0], dtype=dtype)
    advantages, returns = compute_advantages("rloo", scores, ["a", "a", "b", "a"], MASK)
    torch.testing.assert_close(advantages, expand([1.5, -1.5, 0.0, 0.0], dtype), **tol)
    torch.testing.assert_close(returns, advantages)


# ---------------------------------------------------------------------------------------------- ReMax


def test_remax_subtracts_each_responses_greedy_baseline(dtype, tol):
    scores = torch.tensor([1.0, 0.0, 0.0, 1.0], dtype=dtype)
    baseline = torch.tensor([0.5, 0.5, 1.0, 1.0], dtype=dtype)
    advantages, returns = compute_advantages("remax", scores, ["a", "a", "b", "b"], MASK, baseline_scores=baseline)
    torch.testing.assert_close(advantages, expand([0.5, -0.5, -1.0, 0.0], dtype), **tol)
    torch.testing.assert_close(returns, expand([1.0, 0.0, 0.0, 1.0], dtype), **tol)


def test_remax_square_batch_broadcasts_per_row(dtype, tol):
    # EasyR1's bug: with B == L the (B,) advantages broadcast along the token axis. Row i must hold
    # R_i − b_i on its own valid tokens only.
    mask = torch.tensor([[1, 1, 1], [1, 1, 0], [1, 0, 0]])
    scores = torch.tensor([1.0, 2.0, 3.0], dtype=dtype)
    advantages, _ = compute_advantages("remax", scores, [0, 1, 2], mask, baseline_scores=torch.zeros(3, dtype=dtype))
    torch.testing.assert_close(advantages, expand([1.0, 2.0, 3.0], dtype, mask), **tol)


def test_remax_requires_baseline():
    with pytest.raises(ValueError, match="baseline_scores"):
        compute_advantages("remax", torch.zeros(4), list("abcd"), MASK)
    with pytest.raises(ValueError, match=r"baseline_scores must be \[B\]"):
        compute_advantages("remax", torch.zeros(4), list("abcd"), MASK, baseline_scores=torch.zeros(3))


# ---------------------------------------------------------------------------------------------- REINFORCE++


def test_reinforce_plus_plus_token_weighted_whitening(dtype, tol):
    # γ = 1: every valid token of response i has return R_i. Valid returns: five 1s, four 0s (N = 9).
    # μ = 5/9; Σ(G−μ)² = 5·(4/9)² + 4·(5/9)² = 20/9; unbiased var = (20/9)/8 = 5/18.
    scores = torch.tensor([1.0, 0.0, 0.0, 1.0], dtype=dtype)
    advantages, returns = compute_advantages("reinforce_plus_plus", scores, list("abcd"), MASK)
    scale = 1 / math.sqrt(5 / 18 + 1e-8)
    high, low = (1 - 5 / 9) * scale, (0 - 5 / 9) * scale
    torch.testing.assert_close(advantages, expand([high, low, low, high], dtype), **tol)
    torch.testing.assert_close(returns, expand([1.0, 0.0, 0.0, 1.0], dtype), **tol)


def test_reinforce_plus_plus_discounting_and_token_rewards(dtype, tol):
    # token rewards [[1, 0, 2]] with γ = 0.5: G = [1 + 0.5·(0 + 0.5·2), 0 + 0.5·2, 2] = [1.5, 1, 2]
    rewards = torch.tensor([[1.0, 0.0, 2.0], [0.0, 0.0, 0.0]], dtype=dtype)
    mask = torch.tensor([[1, 1, 1], [0, 0, 0]])
    advantages, returns = compute_advantages("reinforce_plus_plus", rewards, [0, 1], mask, gamma=0.5)
    torch.testing.assert_close(returns, torch.tensor([[1.5, 1.0, 2.0], [0.0, 0.0, 0.0]], dtype=dtype), **tol)
    # whiten [1.5, 1, 2]: mean 1.5, unbiased var 0.25
    s = 1 / math.sqrt(0.25 + 1e-8)
    torch.testing.assert_close(advantages, torch.tensor([[0.0, -0.5 * s, 0.5 * s], [0.0] * 3], dtype=dtype), **tol)


def test_reinforce_plus_plus_baseline(dtype, tol):
    # group means: "a" = (1+0)/2, "b" = (0+0)/2 → centred [0.5, −0.5, 0, 0] broadcast over 2,3,1,3 tokens.
    # valid values: 0.5 ×2, −0.5 ×3, 0 ×4 → μ = −0.5/9; whiten with unbiased variance over N = 9.
    scores = torch.tensor([1.0, 0.0, 0.0, 0.0], dtype=dtype)
    advantages, _ = compute_advantages("reinforce_plus_plus_baseline", scores, ["a", "a", "b", "b"], MASK)
    values = [0.5] * 2 + [-0.5] * 3 + [0.0] * 4
    mu = sum(values) / 9
    var = sum((v - mu) ** 2 for v in values) / 8
    s = 1 / math.sqrt(var + 1e-8)
    expected = [(0.5 - mu) * s, (-0.5 - mu) * s, (0 - mu) * s, (0 - mu) * s]
    torch.testing.assert_close(advantages, expand(expected, dtype), **tol)


# ---------------------------------------------------------------------------------------------- GDPO


def test_gdpo_normalises_each_reward_then_whitens(dtype, tol):
    # One group of four, two tokens each. accuracy [1,0,0,1] → ±0.5/(sqrt(1/3)+1e-6);
    # format [1,1,0,1]: mean 0.75, sample std 0.5 → [0.25, 0.25, −0.75, 0.25]/(0.5+1e-6).
    mask = torch.ones(4, 2)
    scores = {
        "accuracy": torch.tensor([1.0, 0.0, 0.0, 1.0], dtype=dtype),
        "format": torch.tensor([1.0, 1.0, 0.0, 1.0], dtype=dtype),
    }
    acc = [d / (math.sqrt(1 / 3) + 1e-6) for d in (0.5, -0.5, -0.5, 0.5)]
    fmt = [d / (0.5 + 1e-6) for d in (0.25, 0.25, -0.75, 0.25)]
    total = [x + y for x, y in zip(acc, fmt)]
    tokens = [t for t in total for _ in range(2)]
    mu = sum(tokens) / 8
    s = 1 / math.sqrt(sum((t - mu) ** 2 for t in tokens) / 7 + 1e-8)
    advantages, _ = compute_advantages("gdpo", scores, ["q"] * 4, mask)
    torch.testing.assert_close(advantages, expand([(t - mu) * s for t in total], dtype, mask), **tol)
    # the plain sum [2,1,0,2] would tie responses 0 and 3 with GRPO too, but GDPO keeps 1 above 2:
    assert advantages[1, 0] > advantages[2, 0]


def test_gdpo_weights_and_errors(dtype, tol):
    mask = torch.ones(2, 1)
    single = {"acc": torch.tensor([1.0, 0.0], dtype=dtype)}
    weighted, _ = compute_advantages("gdpo", single | {"fmt": torch.tensor([0.0, 1.0], dtype=dtype)}, [0, 0], mask,
                                     weights={"fmt": 0.0})
    alone, _ = compute_advantages("gdpo", single, [0, 0], mask)
    torch.testing.assert_close(weighted, alone, **tol)
    with pytest.raises(ValueError, match="'nope'"):
        compute_advantages("gdpo", single, [0, 0], mask, weights={"nope": 1.0})
    with pytest.raises(TypeError, match="mapping"):
        compute_advantages("gdpo", torch.zeros(2), [0, 0], mask)
    with pytest.raises(TypeError, match="only the 'gdpo'"):
        compute_advantages("grpo", single, [0, 0], mask)


# ---------------------------------------------------------------------------------------------- errors


def test_bad_input_errors_name_the_field():
    with pytest.raises(ValueError, match="unknown advantage estimator 'ppo'.*'grpo'"):
        compute_advantages("ppo", torch.zeros(4), list("abcd"), MASK)
    with pytest.raises(ValueError, match=r"unknown option\(s\) \['gamma'\]"):
        compute_advantages("grpo", torch.zeros(4), list("abcd"), MASK, gamma=0.9)
    with pytest.raises(ValueError, match="index has 3 group ids but scores has 4"):
        compute_advantages("grpo", torch.zeros(4), list("abc"), MASK)
    with pytest.raises(ValueError, match=r"scores must be \[B\]"):
        compute_advantages("grpo", torch.zeros(5), list("abcde"), MASK)
    with pytest.raises(ValueError, match=r"scores\[2\] is nan"):
        compute_advantages("grpo", torch.tensor([0.0, 1.0, float("nan"), 1.0]), list("abcd"), MASK)
    with pytest.raises(ValueError, match="option std"):
        compute_advantages("grpo", torch.zeros(4), list("abcd"), MASK, std="batch")
    with pytest.raises(TypeError, match=r"index\[1\]"):
        compute_advantages("grpo", torch.zeros(4), ["a", ["b"], "c", "d"], MASK)


def test_scores_to_token_rewards_puts_reward_on_last_valid_token(dtype):
    rewards = scores_to_token_rewards(torch.tensor([1.0, 2.0, 3.0, 4.0], dtype=dtype), MASK)
    expected = torch.tensor([[0, 1, 0], [0, 0, 2], [3, 0, 0], [0, 0, 4]], dtype=dtype)
    assert torch.equal(rewards, expected)


# ---------------------------------------------------------------------------------------------- W-REINFORCE


def test_w_reinforce_pushes_a_right_answer_up_by_lambda_and_a_wrong_one_down_by_one(dtype, tol):
    # Zhu et al. 2025: λ·PSR + NSR. R = 1 → +λ, R = 0 → −1, an IoU of 0.5 on the line: 0.5·0.1 − 0.5 = −0.45
    scores = torch.tensor([1.0, 0.0, 0.5, 0.0], dtype=dtype)
    advantages, returns = compute_advantages("w_reinforce", scores, ["p", "p", "q", "q"], MASK)
    torch.testing.assert_close(advantages, expand([0.1, -1.0, -0.45, -1.0], dtype), **tol)
    assert returns is advantages
    heavier, _ = compute_advantages("w_reinforce", scores, ["p", "p", "q", "q"], MASK, positive_weight=1.0)
    torch.testing.assert_close(heavier, expand([1.0, -1.0, 0.0, -1.0], dtype), **tol)  # plain REINFORCE on ±1


def test_w_reinforce_gives_a_group_of_equal_rewards_an_advantage_where_grpo_gives_none(dtype, tol):
    # four wrong answers to one prompt: GRPO (any std) has nothing to push; W-REINFORCE pushes each down
    scores = torch.zeros(4, dtype=dtype)
    grpo, _ = compute_advantages("grpo", scores, ["p"] * 4, MASK, std="none")
    assert torch.equal(grpo, torch.zeros_like(grpo))
    pushed, _ = compute_advantages("w_reinforce", scores, ["p"] * 4, MASK)
    torch.testing.assert_close(pushed, expand([-1.0] * 4, dtype), **tol)
    # an overlong-shaped reward below 0 is pushed down harder: (1 + λ)·R − 1
    shaped, _ = compute_advantages("w_reinforce", torch.tensor([-0.5, 1, 1, 1], dtype=dtype), ["p"] * 4, MASK)
    torch.testing.assert_close(shaped, expand([-1.55, 0.1, 0.1, 0.1], dtype), **tol)


def test_w_reinforce_refuses_a_bad_weight_and_a_short_index():
    with pytest.raises(ValueError, match="positive_weight must be a finite number >= 0"):
        compute_advantages("w_reinforce", torch.zeros(4), ["p"] * 4, MASK, positive_weight=-0.1)
    with pytest.raises(ValueError):
        compute_advantages("w_reinforce", torch.zeros(4), ["p"] * 3, MASK)


def test_w_reinforce_moves_mass_off_a_confident_wrong_answer_and_rests_on_the_right_one():
    # A 4-way softmax policy, gradients on its logits (ascent on A·log π(y): A·(e_y − π)).
    eye = torch.eye(4)
    sure_wrong = torch.tensor([0.97, 0.01, 0.01, 0.01])
    # A group whose eight samples all say the wrong "0": GRPO's advantages are 0, W-REINFORCE's −1 each,
    # and the update sends the mass leaving "0" to every other answer, in proportion to what it holds.
    group = -8.0 * (eye[0] - sure_wrong)
    assert group[0] < 0 and torch.allclose(group[1:] / group[1:].sum(), sure_wrong[1:] / sure_wrong[1:].sum())
    # In expectation over samples the right answer ("2") gains and the wrong one loses; the update is 0
    # only at the policy sure of the right answer.
    def expected(probs, right=2):
        a = torch.full((4,), -1.0)
        a[right] = 0.1
        return sum(probs[y] * a[y] * (eye[y] - probs) for y in range(4))
    g = expected(sure_wrong)
    assert g[0] < 0 and g[2] > 0 and g[2] == g.max()
    torch.testing.assert_close(expected(eye[2]), torch.zeros(4))


@pytest.mark.parametrize("estimator", ["grpo", "rloo", "reinforce_plus_plus", "reinforce_plus_plus_baseline",
                                       "w_reinforce"])
def test_advantages_carry_no_gradient_into_scores(estimator):
    scores = torch.tensor([1.0, 0.0, 0.0, 1.0], requires_grad=True)
    advantages, returns = compute_advantages(estimator, scores, ["p"] * 4, MASK)
    assert not advantages.requires_grad and not returns.requires_grad
