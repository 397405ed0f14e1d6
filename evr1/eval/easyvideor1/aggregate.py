"""EasyVideoR1's per-dataset summary (spec §5.4 "Aggregation per dataset") as a `Report`.

- headline `mean_acc`: the mean reward over the non-regression items (so Charades-STA's is its mIoU
  and VideoMathQA's mixes its MCQ and binary items, as published);
- part `mean_mra`: the mean over regression items (VSI-Bench's numeric questions), when there are any;
- OVO-Bench (items with `ovo_task`): per-task accuracy `ovo_task/<T>` → per-category mean of task
  accuracies `ovo_category/<C>` → `ovo_total`, the mean over categories;
- ODV-Bench: accuracy per `odv_task/<t>` and `odv_subtask/<s>`; LiveSports-3K: per
  `q_type_livesports/<q>` and `ocr_livesports/<0|1>`; every benchmark: per `problem_type/<t>`.

One deliberate departure: EasyVideoR1 dropped failed or skipped items from every denominator, which
inflates its numbers; here a failed or missing item counts as 0 (`counts["failed"]` says how many).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from evr1.eval.types import Report
from evr1.eval.easyvideor1.score import problem_type
from evr1.eval.metrics import breakdown, nested_macro, value

Pairs = Sequence[tuple[Mapping[str, Any], Mapping[str, Any]]]
REGRESSION = "regression"
BREAKDOWNS = ("odv_task", "odv_subtask", "q_type_livesports", "ocr_livesports")  # each where items carry it


def _mean(xs: Sequence[float]) -> float:
    return sum(xs) / len(xs) if xs else 0.0


def _has(item: Mapping[str, Any], field: str) -> bool:
    return item.get(field) not in (None, "")


def _ovo(pairs: Pairs) -> tuple[dict[str, float], dict[str, int]]:
    ovo = [(i, r) for i, r in pairs if _has(i, "ovo_task")]
    if not ovo:
        return {}, {}
    rep = nested_macro("ovo_task", "ovo_category", metric="ovo_total")(ovo)
    return {**rep.parts, "ovo_total": rep.value}, {k: v for k, v in rep.counts.items() if k != "items"}


def aggregate(pairs: Pairs) -> Report:
    """`[(item, result)]` → EasyVideoR1's `mean_acc` headline with its breakdowns (failures count 0)."""
    typed = [(problem_type(i), value(r)) for i, r in pairs]
    acc = [v for t, v in typed if t != REGRESSION]
    mra = [v for t, v in typed if t == REGRESSION]
    parts: dict[str, float] = {}
    counts: dict[str, int] = {"items": len(pairs), "mean_acc": len(acc),
                              "failed": sum(1 for _, r in pairs if not r or "error" in r)}
    if mra:
        parts["mean_mra"], counts["mean_mra"] = _mean(mra), len(mra)
    sections = [breakdown(pairs, ("problem_type",)), _ovo(pairs)]
    for field in BREAKDOWNS:
        present = [(i, r) for i, r in pairs if _has(i, field)]
        if present:
            sections.append(breakdown(present, (field,)))
    for more, n in sections:
        parts.update(more)
        counts.update(n)
    return Report("mean_acc", _mean(acc), parts, counts)
