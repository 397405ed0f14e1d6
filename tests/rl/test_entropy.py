"""entropy_from_logits against torch.distributions.Categorical (an independent implementation) and
closed forms; the adaptive entropy coefficient (algorithm.entropy_target) step by step."""

import math

import pytest
import torch

from evr1.rl import AdaptiveEntropyCoefficient, entropy_from_logits, high_entropy_mask


def test_matches_categorical_entropy(dtype, tol):
    torch.manual_seed(0)
    logits = torch.randn(3, 4, 11, dtype=dtype) * 3
    expected = torch.distributions.Categorical(logits=logits).entropy()
    torch.testing.assert_close(entropy_from_logits(logits), expected, **tol)


def test_closed_forms_and_stability(dtype, tol):
    logits = torch.tensor(
        [[0.0, 0.0, 0.0, 0.0], [1e4, 1e4, -1e4, -1e4], [50.0, -50.0, -50.0, -50.0]], dtype=dtype
    )
    expected = torch.tensor([math.log(4), math.log(2), 0.0], dtype=dtype)
    torch.testing.assert_close(entropy_from_logits(logits), expected, **tol)


def test_masked_vocabulary_entries_give_finite_value_and_gradient(dtype, tol):
    logits = torch.tensor([[2.0, float("-inf"), 2.0]], dtype=dtype, requires_grad=True)
    entropy = entropy_from_logits(logits)
    torch.testing.assert_close(entropy, torch.tensor([math.log(2)], dtype=dtype), **tol)
    entropy.sum().backward()
    assert torch.isfinite(logits.grad).all()


def test_gradient_matches_closed_form(dtype, tol):
    # ∂H/∂z_v = −p_v (log p_v + H)
    logits = torch.tensor([[0.3, -1.2, 2.0]], dtype=dtype, requires_grad=True)
    entropy = entropy_from_logits(logits)
    entropy.sum().backward()
    p = torch.softmax(logits.detach(), -1)
    torch.testing.assert_close(logits.grad, -p * (torch.log(p) + entropy.detach()[:, None]), **tol)


def test_half_precision_is_upcast_and_returned_in_input_dtype():
    logits = torch.zeros(2, 1000, dtype=torch.bfloat16)
    entropy = entropy_from_logits(logits)
    assert entropy.dtype == torch.bfloat16
    assert abs(entropy[0].item() - math.log(1000)) < 0.05


def test_high_entropy_mask_keeps_the_top_share_of_valid_tokens():
    entropy = torch.tensor([[0.1, 2.0, 0.3, 9.0], [1.5, 0.2, 0.05, 0.0]])
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 1, 0]], dtype=torch.float32)  # 9.0 is padding: never kept
    kept = high_entropy_mask(entropy, mask, 1 / 3)
    assert kept.tolist() == [[0, 1, 0, 0], [1, 0, 0, 0]]  # 2.0 and 1.5 of the six valid tokens
    assert high_entropy_mask(entropy, mask, 1.0).tolist() == mask.tolist()
    assert high_entropy_mask(entropy, torch.zeros_like(mask), 0.2).sum() == 0


def test_high_entropy_mask_rejects_a_ratio_outside_the_unit_interval():
    with pytest.raises(ValueError, match="top_entropy_ratio"):
        high_entropy_mask(torch.ones(1, 2), torch.ones(1, 2), 0.0)


# -- the adaptive entropy coefficient (algorithm.entropy_target) ---------------------------------------

def test_adaptive_coefficient_rises_below_the_target_and_falls_above_it_within_its_bounds():
    ctrl = AdaptiveEntropyCoefficient(target=0.5, delta=0.01, max_coeff=0.025)
    assert ctrl.value == 0.0  # its start value, before any measurement
    seen = []
    for entropy in (0.1, 0.2, 0.3, 0.4, 0.6, 0.4, 0.7, 0.8, 0.9):
        ctrl.update(entropy)
        seen.append((round(ctrl.coeff, 10), ctrl.value))
    # up by delta while below the target, capped at max; down by delta once at or above; never below 0.
    # The coefficient a step uses is 0 while the last measured entropy is at or above the target.
    assert seen == [(0.01, 0.01), (0.02, 0.02), (0.025, 0.025), (0.025, 0.025), (0.015, 0.0),
                    (0.025, 0.025), (0.015, 0.0), (0.005, 0.0), (0.0, 0.0)]
    ctrl.update(0.5)  # at the target counts as above: the bonus only pushes up towards it
    assert ctrl.coeff == 0.0 and ctrl.value == 0.0


def test_adaptive_coefficient_state_round_trips_and_none_changes_nothing():
    ctrl = AdaptiveEntropyCoefficient(target=0.3, delta=0.002, max_coeff=0.05, coeff=0.01)
    for entropy in (0.1, 0.2, 0.05):
        ctrl.update(entropy)
    before = ctrl.state()
    ctrl.update(None)  # a step with no covered token: nothing measured, nothing adapted
    assert ctrl.state() == before
    again = AdaptiveEntropyCoefficient.from_state(0.3, 0.002, 0.05, before)
    for c in (ctrl, again):
        c.update(0.4)
        c.update(0.1)
    assert again.state() == ctrl.state() and again.value == ctrl.value
    fresh = AdaptiveEntropyCoefficient.from_state(0.3, 0.002, 0.05, None, start=0.004)
    assert fresh.state() == {"coeff": 0.004, "last_entropy": None} and fresh.value == 0.004


@pytest.mark.parametrize("kwargs, match", [
    ({"target": 0.0, "delta": 0.1, "max_coeff": 1.0}, "target"),
    ({"target": 0.3, "delta": 0.0, "max_coeff": 1.0}, "delta"),
    ({"target": 0.3, "delta": 0.1, "max_coeff": -1.0}, "max"),
    ({"target": 0.3, "delta": 0.1, "max_coeff": 0.1, "coeff": 0.2}, "must lie in"),
])
def test_adaptive_coefficient_refuses_bad_settings(kwargs, match):
    with pytest.raises(ValueError, match=match):
        AdaptiveEntropyCoefficient(**kwargs)


def test_adaptive_coefficient_refuses_a_nan_measurement():
    with pytest.raises(ValueError, match="NaN"):
        AdaptiveEntropyCoefficient(0.3, 0.1, 1.0).update(float("nan"))
