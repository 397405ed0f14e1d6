"""entropy_from_logits against torch.distributions.Categorical (an independent implementation) and
closed forms."""

import math

import torch

from evr1.rl import entropy_from_logits


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
