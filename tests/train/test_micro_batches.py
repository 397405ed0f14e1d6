"""Token-budget micro-batches and the balancing of groups over ranks (pure planning, no model)."""

import pytest

from evr1.train import micro_batches as mb


def test_groups_are_dealt_whole_and_balance_tokens():
    groups = [0, 0, 1, 1, 2, 2, 3, 3]
    tokens = [900, 900, 100, 100, 500, 500, 480, 480]
    order = mb.balance_groups(groups, tokens, 2)
    assert sorted(order) == list(range(8))
    shares = [order[:4], order[4:]]
    for share in shares:  # each group lies within one share
        assert len({groups[i] for i in share}) == 2
    load = [sum(tokens[i] for i in share) for share in shares]
    assert load == [2000, 1960]  # groups of 1800 + 200 vs 1000 + 960: the best split (contiguous halves: 3000 vs 960)
    assert mb.balance_groups([0, 0, 1, 1, 2, 2], [1] * 6, 2) is None  # three groups cannot be dealt to two ranks


def test_budget_cuts_stay_within_budget_and_cover_every_response():
    prompts, responses, keys = [100, 100, 300, 300, 50, 50], [10, 20, 5, 5, 40, 1], list("aabbcc")
    cuts = mb.budget_slices(prompts, responses, keys, 250, mb.packed_cost, [(0, 6)])
    assert cuts == [[(0, 2), (2, 3), (3, 4), (4, 6)]]  # 230 | 305 alone | 305 alone | 141
    assert [i for a, b in cuts[0] for i in range(a, b)] == list(range(6))
    # the padded rectangle is dearer: 2 rows × (100 + 20) fits 250, shared groups count the prompt once
    assert mb.padded_cost(prompts[:2], responses[:2], keys[:2]) == 240
    assert mb.shared_cost(prompts[:2], responses[:2], keys[:2]) == 100 + 2 * 20
    # mini-batch bounds are never crossed
    cuts = mb.budget_slices(prompts, responses, keys, 10_000, mb.packed_cost, [(0, 3), (3, 6)])
    assert cuts == [[(0, 3)], [(3, 6)]]


def test_every_rank_runs_as_many_micro_batches():
    prompts = [[100] * 4, [1000] * 4]
    responses = [[10] * 4, [10] * 4]
    keys = [list("aabb"), list("ccdd")]
    cuts, figures = mb.plan(prompts, responses, keys, [(0, 4)], "packed", 1100, fixed=[])
    assert [len(rank[0]) for rank in cuts] == [4, 4]  # rank 0 fits in one, split to match rank 1's four
    # the costliest micro-batch: one of rank 1's 1,000-token prompts with its response, within the budget
    assert figures["micro_batches"] == 4 and figures["max_micro_tokens"] == 1010 and figures["over_budget"] == 0
    for rank, p, r, k in zip(cuts, prompts, responses, keys):
        assert [i for a, b in rank[0] for i in range(a, b)] == list(range(4))


def test_padding_share_and_a_response_over_budget_is_counted():
    prompts, responses, keys = [[10, 30]], [[5, 5]], [list("ab")]
    _, padded = mb.plan(prompts, responses, keys, [(0, 2)], "padded", None, fixed=[[[(0, 2)]]])
    assert padded["padding_share"] == pytest.approx(1 - 50 / 70)
    _, over = mb.plan(prompts, responses, keys, [(0, 2)], "packed", 20, fixed=[])
    assert over["over_budget"] == 1 and over["micro_batches"] == 2
