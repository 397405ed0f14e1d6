"""masked_mean / masked_whiten against hand-computed values."""

import math

import torch

from evr1.rl import masked_mean, masked_whiten

MASK = torch.tensor([[1, 1, 0], [1, 0, 0]])


def test_masked_mean_all_and_per_row(dtype, tol):
    x = torch.tensor([[1.0, 2.0, 100.0], [4.0, 100.0, 100.0]], dtype=dtype)
    # valid entries 1, 2, 4 → mean 7/3; rows: (1+2)/2 and 4/1
    torch.testing.assert_close(masked_mean(x, MASK), torch.tensor(7 / 3, dtype=dtype), **tol)
    torch.testing.assert_close(masked_mean(x, MASK, dim=-1), torch.tensor([1.5, 4.0], dtype=dtype), **tol)


def test_masked_mean_ignores_nan_padding_and_empty_rows(dtype):
    x = torch.tensor([[1.0, float("nan")], [float("-inf"), float("nan")]], dtype=dtype)
    mask = torch.tensor([[True, False], [False, False]])
    assert masked_mean(x, mask).item() == 1.0
    assert masked_mean(x, mask, dim=-1).tolist() == [1.0, 0.0]  # empty row → 0, not nan


def test_masked_whiten_matches_unbiased_formula(dtype, tol):
    x = torch.tensor([[1.0, 2.0, 9.0], [4.0, 9.0, 9.0]], dtype=dtype)
    # valid 1, 2, 4: mean 7/3, unbiased var = ((4/3)² + (1/3)² + (5/3)²)/2 = 7/3
    std = math.sqrt(7 / 3 + 1e-8)
    expected = torch.tensor([[(1 - 7 / 3) / std, (2 - 7 / 3) / std, 0.0], [(4 - 7 / 3) / std, 0.0, 0.0]], dtype=dtype)
    torch.testing.assert_close(masked_whiten(x, MASK), expected, **tol)
    unshifted = masked_whiten(x, MASK, shift_mean=False)
    torch.testing.assert_close(unshifted[0, 0], expected[0, 0] + 7 / 3, **tol)


def test_masked_whiten_single_token_gives_zero(dtype):
    x = torch.tensor([[3.0, 5.0]], dtype=dtype)
    assert masked_whiten(x, torch.tensor([[1, 0]])).tolist() == [[0.0, 0.0]]
