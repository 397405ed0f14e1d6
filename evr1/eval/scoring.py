"""Per-item scorer builders shared by benchmark definitions.

A result whose answer the official rule stage cannot read carries `undecided: True` (counted beside
the score in every official report) and `needs_judge: True` (the LLM judge decides it when
`eval.judge.enabled`, as Video-MME's and VLMEvalKit's pipelines do; otherwise it counts as wrong).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from evr1.eval.types import ItemScorer

Extract = Callable[[str, Mapping[str, Any]], str]  # (answer text, item) → predicted letter or ""


def multiple_choice(extract: Extract) -> ItemScorer:
    """1 when the extracted letter equals the ground-truth letter; `pred` records what was read; an
    empty read is `undecided` and waits for the judge."""

    def score(output: str, item: Mapping[str, Any]) -> dict[str, Any]:
        pred = extract(output or "", item)
        return {"score": 1.0 if pred and pred == item["gt"] else 0.0, "pred": pred, **undecided(not pred)}

    return score


def undecided(flag: bool, *, judge: bool = True) -> dict[str, bool]:
    """The fields of a result the rule stage could not decide (`judge`: the LLM judge may decide it)."""
    return {"undecided": True, **({"needs_judge": True} if judge else {})} if flag else {}


def by_type(table: Mapping[str, ItemScorer], *, benchmark: str) -> ItemScorer:
    """Dispatch on the item's `problem_type`; an unknown type is an error naming the item."""

    def score(output: str, item: Mapping[str, Any]) -> dict[str, Any]:
        fn = table.get(item["problem_type"])
        if fn is None:
            raise ValueError(f"{benchmark} record {item.get('id')!r}: field 'problem_type' = {item['problem_type']!r} "
                             f"has no scorer (known: {', '.join(sorted(table))})")
        return fn(output, item)

    return score
