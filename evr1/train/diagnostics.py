"""What a step's learning signal looks like (`diag/*` metrics), overall and per task family.

Reward and accuracy say how well the policy does; these say whether the update can still change
that, and they are the first things to read when a family stops learning:

* `diag/answer_entropy`: the policy's entropy at the tokens inside `<answer>…</answer>`, averaged per
  response, then over the responses that have such a span (one without does not count). The
  all-token entropy (`actor/entropy`) is mostly the format's tokens, which are near-certain: it can
  look healthy while every answer has hardened into one choice.
* `diag/zero_adv_groups`: the share of groups (a prompt's n responses) whose advantages are all 0
  (within `ZERO`): they add nothing to the gradient.
* `diag/same_reward_groups`: the share of groups whose rewards are all equal. Under a group baseline
  (GRPO, RLOO, Dr. GRPO) these are the zero-advantage groups; without one (`w_reinforce`) they still
  push their answer (down when all are wrong), so this is the measure to compare across estimators.
* `diag/format_only_groups`: the share of groups whose accuracy is the same for every response but
  whose reward varies: their whole advantage comes from the format term (or overlong shaping; with
  per-group std normalisation, a full-size one), and says nothing about which answer is right.
* `diag/modal_answer_adv`: per group, the mean advantage of the responses giving its most frequent
  answer (the content of the last answer tag; ties: all the tied answers together), averaged over the
  groups with any answer. Positive while wrong: the policy is being pushed towards its habit.

Each also as `<key>/<family>`, the family as `evr1.train.breakdown.family` reads it. A group
counts once, with its first response's family. The functions take plain per-response sequences, so
they run on the driver after the update, and the tests build groups by hand.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Any

import numpy as np

from evr1.rewards.extract import answer_tag
from evr1.train.breakdown import family

# An advantage this close to 0 is 0: GRPO gives a constant group exactly 0, and the float noise of a
# normalised one is far smaller than any advantage that moves the policy.
ZERO = 1e-6
# A reward or an accuracy varies inside a group when its range exceeds this.
VARIES = 1e-9
# Tokens at a response's end searched first for its answer tag (`answer_token_span`).
TAIL = 64

# The answer tag as `evr1.rewards.extract` reads it (the same loose tag syntax; tested against `answer_tag`).
_TAG = re.compile(r"<\s*(/?)\s*answer\s*>", re.IGNORECASE)


def answer_char_span(text: str) -> tuple[int, int] | None:
    """[start, end) of the content of the LAST complete `<answer>…</answer>` in `text` (what
    `answer_tag` returns, before trimming), or None when there is none."""
    tags = list(_TAG.finditer(text))
    for i in range(len(tags) - 1, 0, -1):
        close, opening = tags[i], tags[i - 1]
        if close.group(1) and not opening.group(1):
            return opening.end(), close.start()
    return None


def answer_token_span(token_ids: Sequence[int], decode: Callable[[Sequence[int]], str]) -> tuple[int, int] | None:
    """[first, stop) of the response tokens that write the answer's content, or None (no complete tag,
    or an empty one). A token counts when any of its characters lies inside the content, so a token
    that merges the tag with the answer's first letter (`>A`) counts: it decides the answer.

    Found on decoded prefixes by bisection (a prefix's text is a prefix of a longer one's, as in
    `evr1.engines.base.cut_at_stop`), within the response's last `TAIL` tokens first (the answer ends
    a response; the window grows until it holds a complete tag pair), so a response of thousands of
    tokens costs a dozen decodes of a few dozen tokens.
    """
    n = len(token_ids)
    window = TAIL
    while True:  # the last tag pair of the tail is the response's (a tag cut at the tail's start matches nothing)
        offset = max(0, n - window)
        tail = token_ids[offset:]
        span = answer_char_span(decode(tail))
        if span is not None or offset == 0:
            break
        window *= 4
    if span is None or span[0] == span[1]:
        return None
    start, end = span
    def length(k: int) -> int:  # characters written by the tail's first k tokens
        return len(decode(tail[:k]))

    def smallest(k_low: int, k_high: int, holds: Callable[[int], bool]) -> int:
        while k_low < k_high:
            mid = (k_low + k_high) // 2
            if holds(mid):
                k_high = mid
            else:
                k_low = mid + 1
        return k_low

    first = smallest(0, len(tail), lambda k: length(k + 1) > start)  # the token that writes character `start`
    stop = smallest(first, len(tail), lambda k: length(k) >= end)  # tokens before it begin before `end`
    return (offset + first, offset + stop) if stop > first else None


def answer_entropies(entropies: Sequence[Sequence[float] | None],
                     spans: Sequence[tuple[int, int] | None]) -> list[float | None]:
    """Per response, the mean entropy of its answer tokens (`spans`: each response's
    `answer_token_span`); None without an answer span (or entropies)."""
    return [float(np.mean(values[span[0]:span[1]])) if span and values is not None else None
            for values, span in zip(entropies, spans, strict=True)]


def _by_family(key: str, values: Sequence[tuple[str, float]]) -> dict[str, float]:
    """`key`: the mean of the values; `key/<family>`: the mean of each family's."""
    if not values:
        return {}
    per: dict[str, list[float]] = defaultdict(list)
    for name, value in values:
        per[name].append(value)
    return {key: float(np.mean([v for _, v in values])),
            **{f"{key}/{name}": float(np.mean(v)) for name, v in sorted(per.items())}}


def _modal_advantage(answers: Sequence[str | None], advantages: Sequence[float]) -> float | None:
    """The mean advantage of the responses giving the group's most frequent answer (every tied one)."""
    counts = Counter(a for a in answers if a is not None)
    if not counts:
        return None
    top = max(counts.values())
    modes = {a for a, c in counts.items() if c == top}
    return float(np.mean([adv for a, adv in zip(answers, advantages) if a in modes]))


def group_signal(*, groups: Sequence[Hashable], families: Sequence[str], accuracy: Sequence[float],
                 reward: Sequence[float], advantage: Sequence[float], advantage_abs_max: Sequence[float],
                 answers: Sequence[str | None]) -> dict[str, float]:
    """`diag/zero_adv_groups`, `diag/same_reward_groups`, `diag/format_only_groups`, `diag/modal_answer_adv`,
    each overall and per family.

    One entry per response in every sequence: its group id, family, accuracy, total reward (what the
    advantages were computed from), advantage (a scalar: the mean over its tokens), the largest
    |advantage| over its tokens, and its extracted answer (None: it gave none).
    """
    n = len(groups)
    for name, seq in (("families", families), ("accuracy", accuracy), ("reward", reward),
                      ("advantage", advantage), ("advantage_abs_max", advantage_abs_max), ("answers", answers)):
        if len(seq) != n:
            raise ValueError(f"group_signal: {name} has {len(seq)} entries for {n} responses")
    members: dict[Hashable, list[int]] = defaultdict(list)
    for i, g in enumerate(groups):
        members[g].append(i)
    zero, same, format_only, modal = [], [], [], []
    for rows in members.values():
        name = families[rows[0]]
        accuracies, rewards = [accuracy[i] for i in rows], [reward[i] for i in rows]
        rewards_equal = max(rewards) - min(rewards) <= VARIES
        zero.append((name, float(max(advantage_abs_max[i] for i in rows) <= ZERO)))
        same.append((name, float(rewards_equal)))
        format_only.append((name, float(max(accuracies) - min(accuracies) <= VARIES and not rewards_equal)))
        value = _modal_advantage([answers[i] for i in rows], [advantage[i] for i in rows])
        if value is not None:
            modal.append((name, value))
    return {**_by_family("diag/zero_adv_groups", zero), **_by_family("diag/same_reward_groups", same),
            **_by_family("diag/format_only_groups", format_only),
            **_by_family("diag/modal_answer_adv", modal)}


def answer_entropy(families: Sequence[str], values: Sequence[float | None]) -> dict[str, float]:
    """`diag/answer_entropy` overall and per family, over the responses with an answer span."""
    return _by_family("diag/answer_entropy", [(f, v) for f, v in zip(families, values, strict=True) if v is not None])


def step_diagnostics(*, rows: Sequence[Mapping[str, Any]], groups: Sequence[Hashable], scores: Sequence[Mapping],
                     reward: Sequence[float], advantage: Sequence[float], advantage_abs_max: Sequence[float],
                     texts: Sequence[str], entropies: Sequence[Sequence[float] | None] | None,
                     answer_spans: Sequence[tuple[int, int] | None]) -> dict[str, float]:
    """Every `diag/*` metric of a step's trained batch: one entry per response in each sequence (its
    sample row, group, scores, reward, advantage, text, per-token entropies, or None for all when the
    update returned none, and the tokens of its answer's content, `answer_token_span`)."""
    families = [family(r) for r in rows]
    out = group_signal(groups=groups, families=families, accuracy=[float(s.get("accuracy", 0.0)) for s in scores],
                       reward=reward, advantage=advantage, advantage_abs_max=advantage_abs_max,
                       answers=[answer_tag(t) or None for t in texts])  # an empty tag is no answer
    if entropies is not None:
        out.update(answer_entropy(families, answer_entropies(entropies, answer_spans)))
    return out
