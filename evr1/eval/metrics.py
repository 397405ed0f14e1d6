"""Official aggregations: per-item results → a benchmark's headline metric and its breakdowns.

Each function returns an `Aggregate`: it takes `[(item, result)]` (a failed or missing item has a
result with score 0, so failures count as wrong) and returns a `Report` whose values lie in [0, 1].
Benchmarks pick one in their definition; the table below is what they use.

| aggregate | headline | used by |
| --- | --- | --- |
| `accuracy(*fields)` | micro accuracy, breakdown by each field | most multiple-choice benchmarks |
| `macro(field)` | mean over the field's groups of the group accuracy | MLVU M-Avg |
| `nested_macro(inner, outer)` | tasks → categories → mean of categories | OVO-Bench |
| `task_mean(tasks)` | mean of per-task scores, tasks merged as declared | VSI-Bench |
| `all_of(group_field, …)` | a group counts only if all its items are right | VideoMathQA MBin |
| `grounding()` | mIoU and R@{0.3, 0.5, 0.7} from each result's `iou` | Charades-STA |
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from evr1.eval.types import Aggregate, Report

Pairs = Sequence[tuple[Mapping[str, Any], Mapping[str, Any]]]


def value(result: Mapping[str, Any] | None, key: str = "score") -> float:
    """A result's score; a missing or failed result is 0."""
    if not result or "error" in result:
        return 0.0
    return float(result.get(key, 0.0) or 0.0)


def _mean(xs: Sequence[float]) -> float:
    return sum(xs) / len(xs) if xs else 0.0


def field_of(item: Mapping[str, Any], name: str) -> str:
    v = item.get(name)
    return "unknown" if v is None or v == "" else str(v)


def breakdown(pairs: Pairs, fields: Sequence[str], key: str = "score") -> tuple[dict[str, float], dict[str, int]]:
    """Accuracy per value of each field: {"field/value": mean}, with counts."""
    groups: dict[str, list[float]] = defaultdict(list)
    for item, res in pairs:
        for f in fields:
            groups[f"{f}/{field_of(item, f)}"].append(value(res, key))
    return {g: _mean(v) for g, v in sorted(groups.items())}, {g: len(v) for g, v in sorted(groups.items())}


def accuracy(*fields: str, metric: str = "accuracy") -> Aggregate:
    """Micro accuracy over every item, broken down by `fields`."""

    def agg(pairs: Pairs) -> Report:
        parts, counts = breakdown(pairs, fields)
        return Report(metric, _mean([value(r) for _, r in pairs]), parts, {"items": len(pairs), **counts})

    return agg


def macro(field: str, *fields: str, metric: str = "m-avg") -> Aggregate:
    """Mean over the groups of `field` of each group's accuracy (MLVU's M-Avg); micro accuracy as a part."""

    def agg(pairs: Pairs) -> Report:
        parts, counts = breakdown(pairs, (field, *fields))
        groups = [v for k, v in parts.items() if k.startswith(f"{field}/")]
        parts["micro_accuracy"] = _mean([value(r) for _, r in pairs])
        return Report(metric, _mean(groups), parts, {"items": len(pairs), **counts})

    return agg


def nested_macro(inner: str, outer: str, *, metric: str = "overall", categories: Sequence[str] = ()) -> Aggregate:
    """Per-`inner` accuracy → per-`outer` mean of its inners → mean over outers (OVO-Bench).

    `categories` fixes which outer groups the headline averages (a category with no items scores 0,
    so a partial run is not reported as a full one).
    """

    def agg(pairs: Pairs) -> Report:
        by_task: dict[tuple[str, str], list[float]] = defaultdict(list)
        for item, res in pairs:
            by_task[(field_of(item, outer), field_of(item, inner))].append(value(res))
        parts: dict[str, float] = {}
        by_cat: dict[str, list[float]] = defaultdict(list)
        for (cat, task), xs in sorted(by_task.items()):
            parts[f"{inner}/{task}"] = _mean(xs)
            by_cat[cat].append(_mean(xs))
        cats = list(categories) or sorted(by_cat)
        for cat in cats:
            parts[f"{outer}/{cat}"] = _mean(by_cat.get(cat, []))
        counts = {f"{inner}/{t}": len(xs) for (_, t), xs in sorted(by_task.items())}
        return Report(metric, _mean([parts[f"{outer}/{c}"] for c in cats]), parts, {"items": len(pairs), **counts})

    return agg


def task_mean(field: str, tasks: Mapping[str, Sequence[str]], *, metric: str = "overall") -> Aggregate:
    """Mean over declared tasks of each task's score; a task may merge several raw values of `field`
    (VSI-Bench's relative direction = mean of its easy, medium and hard accuracies)."""

    def agg(pairs: Pairs) -> Report:
        raw: dict[str, list[float]] = defaultdict(list)
        for item, res in pairs:
            raw[field_of(item, field)].append(value(res))
        parts: dict[str, float] = {f"{field}/{k}": _mean(v) for k, v in sorted(raw.items())}
        task_scores = []
        for task, members in tasks.items():
            present = [_mean(raw[m]) for m in members if raw.get(m)]
            parts[f"task/{task}"] = _mean(present)
            task_scores.append(parts[f"task/{task}"])
        counts = {f"{field}/{k}": len(v) for k, v in sorted(raw.items())}
        return Report(metric, _mean(task_scores), parts, {"items": len(pairs), **counts})

    return agg


def all_of(group_field: str, *, member: Callable[[Mapping[str, Any]], bool], metric: str,
           also: Mapping[str, Callable[[Mapping[str, Any]], bool]] | None = None, headline: str | None = None) -> Aggregate:
    """A group of `member` items (same `group_field`) scores 1 only if all its items are right (MBin).

    `also` adds plain accuracies over other item subsets ({"mcq": is_mcq}); `headline` picks which
    part is the headline (default: the all-of metric).
    """

    def agg(pairs: Pairs) -> Report:
        groups: dict[str, list[float]] = defaultdict(list)
        for item, res in pairs:
            if member(item):
                groups[field_of(item, group_field)].append(value(res))
        parts = {metric: _mean([1.0 if xs and min(xs) >= 1.0 else 0.0 for xs in groups.values()])}
        counts = {metric: len(groups)}
        for name, pred in (also or {}).items():
            xs = [value(r) for i, r in pairs if pred(i)]
            parts[name], counts[name] = _mean(xs), len(xs)
        parts["micro_accuracy"] = _mean([value(r) for _, r in pairs])
        head = headline or metric
        return Report(head, parts[head], parts, {"items": len(pairs), **counts})

    return agg


def grounding(*fields: str, thresholds: Sequence[float] = (0.3, 0.5, 0.7), metric: str = "miou") -> Aggregate:
    """mIoU (mean of each result's `iou`, unparseable = 0) and R@m = share of items with IoU ≥ m."""

    def agg(pairs: Pairs) -> Report:
        ious = [value(r, "iou") for _, r in pairs]
        parts = {f"R@{m:g}": _mean([1.0 if x >= m else 0.0 for x in ious]) for m in thresholds}
        more, counts = breakdown(pairs, fields, key="iou")
        parts.update(more)
        return Report(metric, _mean(ious), parts, {"items": len(pairs), **counts})

    return agg


def combine(head: Aggregate, **others: Aggregate) -> Aggregate:
    """`head`'s report with each other aggregate's headline (and parts) added under its name."""

    def agg(pairs: Pairs) -> Report:
        rep = head(pairs)
        parts = dict(rep.parts)
        for name, other in others.items():
            o = other(pairs)
            parts[name] = o.value
            parts.update({f"{name}/{k}": v for k, v in o.parts.items()})
        return Report(rep.metric, rep.value, parts, rep.counts)

    return agg
