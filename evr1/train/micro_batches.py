"""Which responses go to which rank, and how each rank cuts its share into micro-batches.

Video prompts range from hundreds to tens of thousands of tokens, so a fixed number of responses
per micro-batch either wastes the accelerator on short ones or runs out of memory on long ones.
With a token budget (`trainer.max_tokens_per_micro_batch`) the driver:

1. balances whole prompt groups over the ranks by tokens (longest first, each to the lightest rank
   with room), keeping every rank's response count equal and each group on one rank (so the shared
   prompt prefix still sees whole groups);
2. cuts each rank's share, mini-batch by mini-batch, into consecutive micro-batches whose cost stays
   within the budget (a single longer response gets a micro-batch of its own);
3. splits the costliest micro-batches of ranks that have fewer, until every rank has as many in
   every mini-batch: FSDP2's collectives need every rank to run the same number of passes.

Costs count what a pass computes: packed (padding-free) rows cost their tokens; padded ones the
padded rectangle; shared-prefix groups their prompt once plus the responses.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

Slices = list[tuple[int, int]]  # [start, stop) of consecutive responses
Cost = Callable[[Sequence[int], Sequence[int], Sequence[str]], int]


def packed_cost(prompts: Sequence[int], responses: Sequence[int], keys: Sequence[str]) -> int:
    """Tokens of the sequences laid end to end (no padding)."""
    return sum(prompts) + sum(responses)


def padded_cost(prompts: Sequence[int], responses: Sequence[int], keys: Sequence[str]) -> int:
    """The padded rectangle: rows × (longest prompt + longest response)."""
    return len(prompts) * (max(prompts, default=0) + max(responses, default=0))


def shared_cost(prompts: Sequence[int], responses: Sequence[int], keys: Sequence[str]) -> int:
    """Each prompt once (its n responses run on its cached keys/values), plus its padded responses."""
    total, i = 0, 0
    while i < len(keys):
        j = i
        while j < len(keys) and keys[j] == keys[i]:
            j += 1
        total += prompts[i] + (j - i) * max(responses[i:j])
        i = j
    return total


COSTS: dict[str, Cost] = {"packed": packed_cost, "padded": padded_cost, "shared": shared_cost}


def balance_groups(groups: Sequence[int], tokens: Sequence[int], world_size: int) -> list[int] | None:
    """An order of the responses whose equal contiguous shares have balanced token counts, groups kept
    whole; None when the groups cannot be dealt out evenly (then the given order stays)."""
    members: dict[int, list[int]] = {}
    for i, g in enumerate(groups):
        members.setdefault(g, []).append(i)
    sizes = {len(m) for m in members.values()}
    if len(sizes) != 1 or len(members) % world_size:
        return None
    per_rank = len(members) // world_size
    load = [0] * world_size
    dealt: list[list[int]] = [[] for _ in range(world_size)]
    for g in sorted(members, key=lambda g: -sum(tokens[i] for i in members[g])):
        rank = min((r for r in range(world_size) if len(dealt[r]) < per_rank), key=lambda r: load[r])
        dealt[rank].append(g)
        load[rank] += sum(tokens[i] for i in members[g])
    return [i for rank in dealt for g in sorted(rank) for i in members[g]]


def budget_slices(prompts: Sequence[int], responses: Sequence[int], keys: Sequence[str], budget: int,
                  cost: Cost, bounds: Slices) -> list[Slices]:
    """Per mini-batch (`bounds`), consecutive micro-batches whose cost stays within `budget`."""
    out: list[Slices] = []
    for start, stop in bounds:
        cuts: Slices = []
        first = start
        for i in range(start + 1, stop + 1):
            if i == stop or cost(prompts[first:i + 1], responses[first:i + 1], keys[first:i + 1]) > budget:
                cuts.append((first, i))
                first = i
        out.append(cuts)
    return out


def equalize(per_rank: list[list[Slices]], prompts: list[Sequence[int]], responses: list[Sequence[int]],
             keys: list[Sequence[str]], cost: Cost) -> list[list[Slices]]:
    """Split the costliest splittable micro-batch of a rank until every rank has as many micro-batches
    as the busiest one, in every mini-batch."""
    out = [[list(m) for m in rank] for rank in per_rank]
    for k in range(len(out[0])):
        target = max(len(rank[k]) for rank in out)
        for r, rank in enumerate(out):
            cuts = rank[k]
            while len(cuts) < target:
                splittable = [c for c in cuts if c[1] - c[0] > 1]
                if not splittable:  # cannot happen with equal response counts per rank
                    raise ValueError(f"rank {r}: {len(cuts)} single-response micro-batches cannot make {target}")
                a, b = max(splittable, key=lambda c: cost(prompts[r][c[0]:c[1]], responses[r][c[0]:c[1]],
                                                          keys[r][c[0]:c[1]]))
                mid = (a + b) // 2
                i = cuts.index((a, b))
                cuts[i:i + 1] = [(a, mid), (mid, b)]
    return out


def useful_tokens(prompts: Sequence[int], responses: Sequence[int], keys: Sequence[str], mode: str) -> int:
    """Tokens a pass must compute: every prompt and response once (a shared prompt once per group)."""
    if mode == "shared":
        firsts = [i for i in range(len(keys)) if i == 0 or keys[i] != keys[i - 1]]
        return sum(prompts[i] for i in firsts) + sum(responses)
    return packed_cost(prompts, responses, keys)


def plan(prompts: list[Sequence[int]], responses: list[Sequence[int]], keys: list[Sequence[str]],
         bounds: Slices, mode: str, budget: int | None, fixed: list[list[Slices]]) -> tuple[list[list[Slices]], dict]:
    """Every rank's micro-batches (per mini-batch `bounds`) and their figures: by token budget when
    `budget` is set, else the `fixed` cuts; `mode` names the pass's cost (`COSTS`)."""
    cost = COSTS[mode]
    if budget is not None:
        cuts = [budget_slices(p, r, k, budget, cost, bounds) for p, r, k in zip(prompts, responses, keys)]
        cuts = equalize(cuts, prompts, responses, keys, cost)
    else:
        cuts = fixed
    parts = [(p[a:b], r[a:b], k[a:b]) for p, r, k, rank in zip(prompts, responses, keys, cuts)
             for mini in rank for a, b in mini]
    costs = [cost(*part) for part in parts]
    useful = sum(useful_tokens(*part, mode) for part in parts)
    figures = {"micro_batches": float(sum(len(m) for m in cuts[0])),
               "padding_share": 1.0 - useful / sum(costs) if sum(costs) else 0.0,
               "max_micro_tokens": float(max(costs, default=0)),
               "over_budget": float(sum(c > budget for c in costs) if budget else 0)}
    return cuts, figures
