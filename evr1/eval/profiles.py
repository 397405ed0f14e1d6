"""Scoring profiles: which prompt, per-item scorer and aggregation a benchmark runs under.

- `official` (default): the benchmark's own definition. Reasoning blocks are removed from the output
  before its extractor runs (lmms-eval's default `--reasoning_tags`), so thinking and non-thinking
  runs are scored alike. Deviation shared by every benchmark: the tags match in any letter case
  (`<THINK>…</THINK>` is removed; lmms-eval's match is case-sensitive) and a removed block leaves a
  space ("A<think>…</think>B" → "A B", lmms-eval "AB"). The report counts the answers the rule stage
  could not decide as `undecided` (a part beside the headline; `undecided/judged`: how many of them
  the LLM judge has decided since).
- `easyvideor1`: EasyVideoR1's one prompt builder, extractor, scorer and aggregation for every
  benchmark (`evr1.eval.easyvideor1`), to compare side by side with its published numbers.

A benchmark with `extra["single_profile"]` (the held-out split) uses its own definition under both.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from evr1.eval.types import PROFILES, Aggregate, ItemScorer, PromptContext, Report
from evr1.eval.prompting import strip_reasoning

if TYPE_CHECKING:  # the registry dispatches to the profiles; they only read its definitions
    from evr1.eval.benchmark import Benchmark


def _check(profile: str) -> None:
    if profile not in PROFILES:
        raise ValueError(f"unknown scoring profile {profile!r}; known: {', '.join(PROFILES)}")


def _own(bench: Benchmark, profile: str) -> bool:
    _check(profile)
    return profile == "official" or bool(bench.extra.get("single_profile"))


def prompt_for(bench: Benchmark, item: Mapping[str, Any], ctx: PromptContext) -> str:
    if _own(bench, ctx.profile):
        return bench.prompt(item, ctx)
    from evr1.eval import easyvideor1

    return easyvideor1.prompt(item, ctx)


def scorer_for(bench: Benchmark, profile: str) -> ItemScorer:
    if _own(bench, profile):
        if bench.extra.get("single_profile"):
            return bench.score

        def official(output: str, item: Mapping[str, Any]) -> dict[str, Any]:
            return bench.score(strip_reasoning(output or ""), item)

        return official
    from evr1.eval import easyvideor1

    return easyvideor1.score


def aggregate_for(bench: Benchmark, profile: str) -> Aggregate:
    if _own(bench, profile):
        return with_undecided(bench.aggregate)
    from evr1.eval import easyvideor1

    return easyvideor1.aggregate


def with_undecided(aggregate: Aggregate) -> Aggregate:
    """`aggregate` plus the parts `undecided` (results the rule stage could not read) and
    `undecided/judged` (those the LLM judge has decided since)."""

    def agg(pairs: Sequence[tuple[Mapping[str, Any], Mapping[str, Any]]]) -> Report:
        report = aggregate(pairs)
        flagged = [r for _, r in pairs if r and r.get("undecided")]
        parts = {**report.parts, "undecided": float(len(flagged)),
                 "undecided/judged": float(sum(1 for r in flagged if r.get("judged")))}
        return replace(report, parts=parts)

    return agg
