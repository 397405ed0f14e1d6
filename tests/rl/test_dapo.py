"""DAPO helpers: dynamic sampling masks and the soft overlong penalty (values by hand)."""

import numpy as np
import pytest
import torch

from evr1.rl import dynamic_sampling_keep, overlong_penalty

SCORES = [1.0, 1.0, 0.0, 1.0, 0.5, 0.5, 2.0]
INDEX = ["a", "a", "b", "b", "c", "c", "d"]  # a: equal, b: varies, c: equal at 0.5, d: alone


def test_std_rule_keeps_only_groups_whose_scores_vary():
    keep = dynamic_sampling_keep(torch.tensor(SCORES), INDEX)
    assert keep.tolist() == [False, False, True, True, False, False, False]
    assert keep.dtype == torch.bool


def test_mean_range_rule_keeps_means_strictly_inside():
    # group means: a 1.0, b 0.5, c 0.5, d 2.0 → inside (0.01, 0.99): b and c (c is the documented
    # case where the mean rule keeps a zero-advantage group)
    keep = dynamic_sampling_keep(np.array(SCORES), INDEX, rule="mean_range", low=0.01, high=0.99)
    assert keep.tolist() == [False, False, True, True, True, True, False]
    edge = dynamic_sampling_keep([0.0, 1.0, 1.0, 1.0], [0, 0, 1, 1], rule="mean_range", low=0.5, high=1.0)
    assert edge.tolist() == [False, False, False, False]  # 0.5 and 1.0 are on the bounds


def test_dynamic_sampling_errors():
    with pytest.raises(ValueError, match="unknown dynamic sampling rule 'range'"):
        dynamic_sampling_keep(SCORES, INDEX, rule="range")
    with pytest.raises(ValueError, match="needs both low and high"):
        dynamic_sampling_keep(SCORES, INDEX, rule="mean_range", low=0.1)
    with pytest.raises(ValueError, match="index has 2 group ids but scores has 7"):
        dynamic_sampling_keep(SCORES, ["a", "b"])


def test_overlong_penalty(dtype):
    # L_max 20, buffer 4: free up to 16, then (16 − ℓ)/4·f, −f beyond 20
    lengths = torch.tensor([10, 16, 17, 18, 20, 21])
    assert overlong_penalty(lengths, max_response_length=20, buffer_len=4, penalty_factor=1.0).tolist() == [
        0.0, 0.0, -0.25, -0.5, -1.0, -1.0,
    ]
    lengths = torch.tensor([17.0, 30.0], dtype=dtype)
    halved = overlong_penalty(lengths, max_response_length=20, buffer_len=4, penalty_factor=0.5)
    assert halved.dtype == dtype and halved.tolist() == [-0.125, -0.5]


def test_overlong_penalty_errors():
    with pytest.raises(ValueError, match="buffer_len must be in"):
        overlong_penalty([1], max_response_length=10, buffer_len=11)
    with pytest.raises(ValueError, match=r"lengths\[1\] is negative"):
        overlong_penalty([1, -2], max_response_length=10, buffer_len=2)
