"""`RowSeededSampler`: per-row seeded sampling inside one batched generate, by the Gumbel-max rule.

Its filters are transformers' own (checked against the warpers it replaces), its draws follow the
filtered softmax (checked by frequency over many rows), and a row's draws depend on its seed alone."""

from __future__ import annotations

import math

import pytest
import torch
from transformers import TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper

from evr1.engines.row_sampler import RowSeededSampler


@pytest.mark.parametrize(("temperature", "top_k", "top_p"),
                         [(1.0, 0, 1.0), (0.7, 0, 1.0), (1.3, 5, 1.0), (1.0, 0, 0.8), (0.9, 7, 0.6), (1.0, 50, 0.95)])
def test_the_filters_are_transformers_warpers_in_their_order(temperature, top_k, top_p):
    torch.manual_seed(0)
    scores = torch.randn(6, 40) * 3
    scores[0, :4] = 2.5  # ties at the top-k boundary and inside the nucleus
    scores[1, 3] = float("-inf")  # a suppressed token stays suppressed
    expected = scores.clone()
    ids = torch.zeros(6, 1, dtype=torch.long)
    if temperature != 1.0:
        expected = TemperatureLogitsWarper(temperature)(ids, expected)
    if top_k > 0:
        expected = TopKLogitsWarper(top_k)(ids, expected)
    if top_p < 1.0:
        expected = TopPLogitsWarper(top_p)(ids, expected)
    got = RowSeededSampler(range(6), temperature=temperature, top_k=top_k, top_p=top_p).filtered(scores)
    assert torch.equal(torch.isinf(got), torch.isinf(expected))
    finite = torch.isfinite(expected)
    torch.testing.assert_close(got[finite], expected[finite], rtol=0, atol=1e-6)


@pytest.mark.parametrize(("temperature", "top_k", "top_p"), [(1.0, 0, 1.0), (0.5, 0, 1.0), (1.0, 3, 1.0), (1.0, 0, 0.7)])
def test_the_argmax_of_its_scores_is_a_draw_from_the_filtered_softmax(temperature, top_k, top_p):
    rows = 40_000
    logits = torch.tensor([2.0, 1.0, 0.5, 0.0, -1.0, -3.0])
    sampler = RowSeededSampler(range(rows), temperature=temperature, top_k=top_k, top_p=top_p)
    picks = sampler(torch.zeros(rows, 1, dtype=torch.long), logits.expand(rows, -1).clone()).argmax(-1)
    freq = torch.bincount(picks, minlength=len(logits)).double() / rows
    p = sampler.filtered(logits[None]).softmax(-1)[0].double()
    assert torch.all(freq[p == 0] == 0)  # nothing outside what the filters keep
    sigma = torch.sqrt(p * (1 - p) / rows)
    assert torch.all((freq - p).abs() <= 5 * sigma + 1e-12), (freq, p)
    assert (p > 0).sum() > 1  # a real choice, not one token


def test_a_rows_draws_depend_on_its_seed_alone_step_after_step():
    torch.manual_seed(1)
    steps = [torch.randn(3, 30) for _ in range(4)]
    together = RowSeededSampler([11, 22, 33], temperature=1.0)
    alone = RowSeededSampler([22], temperature=1.0)
    again = RowSeededSampler([5, 22], temperature=1.0)
    ids = torch.zeros(3, 1, dtype=torch.long)
    for z in steps:  # the same logits for row 22 in every batch: the same scores, step after step
        a = together(ids, z)[1]
        torch.testing.assert_close(alone(ids[:1], z[1:2])[0], a, rtol=0, atol=0)
        torch.testing.assert_close(again(ids[:2], torch.stack([z[2], z[1]]))[1], a, rtol=0, atol=0)
    # torch's global generator is neither read nor advanced
    state = torch.get_rng_state()
    RowSeededSampler([1, 2], temperature=1.0)(ids[:2], steps[0][:2])
    assert torch.equal(state, torch.get_rng_state())


def test_different_seeds_draw_differently():
    z = torch.zeros(2, 1000)
    picks = RowSeededSampler([1, 2], temperature=1.0)(torch.zeros(2, 1, dtype=torch.long), z).argmax(-1)
    assert picks[0] != picks[1]  # 1 in 1000 to collide by chance for these two fixed seeds


def test_refusals():
    with pytest.raises(ValueError, match="temperature must be > 0"):
        RowSeededSampler([1], temperature=0.0)
    with pytest.raises(ValueError, match=r"top_p must be in \(0, 1\]"):
        RowSeededSampler([1], temperature=1.0, top_p=0.0)
    with pytest.raises(ValueError, match="3 rows for 2 seeds"):
        RowSeededSampler([1, 2], temperature=1.0)(torch.zeros(3, 1, dtype=torch.long), torch.zeros(3, 5))
    assert math.isfinite(RowSeededSampler([1], temperature=1.0)(torch.zeros(1, 1, dtype=torch.long),
                                                                  torch.zeros(1, 5)).max().item())
