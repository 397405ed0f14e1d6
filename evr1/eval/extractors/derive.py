"""Aggregations over fields derived from an item (a subject from the video path, a track from the id).

Official breakdowns sometimes group by something the annotation file does not store as a field
(MMVU's discipline lives in the video path); `with_fields` adds such fields to each item before an
aggregation from `evr1.eval.metrics` reads them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from evr1.eval.types import Aggregate, Report


def with_fields(agg: Aggregate, **derive: Callable[[Mapping[str, Any]], Any]) -> Aggregate:
    """`agg` over items extended with `name=fn(item)` for each derived field (an existing field wins)."""

    def wrapped(pairs) -> Report:
        return agg([({**{k: fn(item) for k, fn in derive.items() if k not in item}, **item}, res)
                    for item, res in pairs])

    return wrapped
