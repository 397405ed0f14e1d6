"""aggregate_loss: the four modes on a hand-checked example, and exact micro-batch decomposition."""

import pytest
import torch

from evr1.rl import aggregate_loss

LOSS = [[1.0, 2.0, 3.0], [4.0, 5.0, 6.0], [7.0, 8.0, 9.0]]
MASK = torch.tensor([[1, 1, 0], [1, 0, 0], [0, 0, 0]])  # third sequence has no valid token


@pytest.mark.parametrize(
    "mode, expected",
    [
        ("token-mean", (1 + 2 + 4) / 3),
        ("seq-mean-token-mean", (1.5 + 4) / 2),  # the empty sequence does not count
        ("seq-mean-token-sum", (3 + 4) / 2),
        ("seq-mean-token-sum-norm", (1 + 2 + 4) / 3),  # divided by the padded length L = 3
    ],
)
def test_modes(mode, expected, dtype, tol):
    loss = torch.tensor(LOSS, dtype=dtype)
    torch.testing.assert_close(aggregate_loss(loss, MASK, mode), torch.tensor(expected, dtype=dtype), **tol)


def test_loss_scale_factor(dtype, tol):
    loss = torch.tensor(LOSS, dtype=dtype)
    value = aggregate_loss(loss, MASK, "seq-mean-token-sum-norm", loss_scale_factor=7)
    torch.testing.assert_close(value, torch.tensor(1.0, dtype=dtype), **tol)


def test_global_token_count_makes_micro_batches_sum_to_the_global_token_mean(dtype, tol):
    torch.manual_seed(0)
    loss = torch.randn(6, 5, dtype=dtype, requires_grad=True)
    mask = torch.rand(6, 5) > 0.3
    whole = aggregate_loss(loss, mask, "token-mean")
    (whole_grad,) = torch.autograd.grad(whole, loss)
    count = int(mask.sum())
    micro_batches = (slice(0, 2), slice(2, 6))
    parts = [aggregate_loss(loss[s], mask[s], "token-mean", global_token_count=count) for s in micro_batches]
    total = parts[0] + parts[1]
    (parts_grad,) = torch.autograd.grad(total, loss)
    torch.testing.assert_close(total, whole, **tol)
    torch.testing.assert_close(parts_grad, whole_grad, **tol)
    # without the global count each micro-batch is its own mean: averaging them is not the token mean
    local = [aggregate_loss(loss[s], mask[s], "token-mean") for s in micro_batches]
    assert not torch.isclose((local[0] + local[1]) / 2, whole)


@pytest.mark.parametrize("mode", ["seq-mean-token-mean", "seq-mean-token-sum"])
def test_global_seq_count_is_exact_and_token_share_is_easyr1s_rescaling(mode, dtype, tol):
    loss = torch.tensor(LOSS, dtype=dtype)
    whole = aggregate_loss(loss, MASK, mode)
    parts = aggregate_loss(loss[:1], MASK[:1], mode, global_seq_count=2) + aggregate_loss(
        loss[1:], MASK[1:], mode, global_seq_count=2
    )
    torch.testing.assert_close(parts, whole, **tol)
    # EasyR1: local sequence mean × local tokens / global tokens (2 of 3 tokens in the first micro-batch)
    share = aggregate_loss(loss[:1], MASK[:1], mode, global_token_count=3)
    torch.testing.assert_close(share, aggregate_loss(loss[:1], MASK[:1], mode) * 2 / 3, **tol)


def test_empty_mask_gives_zero_and_zero_gradient(dtype):
    loss = torch.full((2, 3), float("nan"), dtype=dtype, requires_grad=True)
    for mode in ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm"):
        value = aggregate_loss(loss, torch.zeros(2, 3), mode)
        (grad,) = torch.autograd.grad(value, loss)
        assert value.item() == 0.0 and torch.equal(grad, torch.zeros_like(grad)), mode


def test_bad_arguments():
    loss = torch.zeros(2, 3)
    with pytest.raises(ValueError, match="unknown loss_agg_mode 'seq'"):
        aggregate_loss(loss, torch.ones(2, 3), "seq")
    with pytest.raises(ValueError, match="mask has shape"):
        aggregate_loss(loss, torch.ones(2, 2), "token-mean")
    with pytest.raises(ValueError, match="global_token_count must be > 0"):
        aggregate_loss(loss, torch.ones(2, 3), "token-mean", global_token_count=0)
