"""Per-item scorer builders shared by benchmark definitions."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from evr1.eval.benchmark import ItemScorer

Extract = Callable[[str, Mapping[str, Any]], str]  # (answer text, item) → predicted letter or ""


def multiple_choice(extract: Extract) -> ItemScorer:
    """1 when the extracted letter equals the ground-truth letter; `pred` records what was read."""

    def score(output: str, item: Mapping[str, Any]) -> dict[str, Any]:
        pred = extract(output or "", item)
        return {"score": 1.0 if pred and pred == item["gt"] else 0.0, "pred": pred}

    return score


def by_type(table: Mapping[str, ItemScorer], *, benchmark: str) -> ItemScorer:
    """Dispatch on the item's `problem_type`; an unknown type is an error naming the item."""

    def score(output: str, item: Mapping[str, Any]) -> dict[str, Any]:
        fn = table.get(item["problem_type"])
        if fn is None:
            raise ValueError(f"{benchmark} record {item.get('id')!r}: field 'problem_type' = {item['problem_type']!r} "
                             f"has no scorer (known: {', '.join(sorted(table))})")
        return fn(output, item)

    return score
