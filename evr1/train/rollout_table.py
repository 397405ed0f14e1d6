"""Readable rollouts: a few prompts with what the model wrote, its rewards and advantages, as table rows.

Metrics say how much reward a step earned; these rows show what earned it. Every
`trainer.log_rollouts_every` steps the trainer hands `rollout_table_rows` responses of the batch it
trained on (whole groups first, so a reader sees a group's spread and the advantages it produced) to a
sink: an MLflow table artifact (`rollouts/step_000042.json`, `Tracker.log_table`), and a Prefect table artifact when the flow runs
it. Validation's greedy answers go the same way (`validation/step_000042.json`). The sink is a plain
callable: `evr1` never imports the orchestrator.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from evr1.train.collect import Rollout

log = logging.getLogger(__name__)

#: (artifact file, rows): what a table is handed to.
TableSink = Callable[[str, list[dict]], None]

PROMPT_CHARS = 300  # enough to recognise the question; the video's vision tokens are never shown
RESPONSE_CHARS = 2000


def shorten(text: str, limit: int) -> str:
    """`text` cut to `limit` characters, with an ellipsis saying so."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


def pick(groups: Sequence[int], limit: int) -> list[int]:
    """Indices of at most `limit` responses: whole groups in batch order, or the first group's first
    `limit` responses when even one group is larger than that."""
    members: dict[int, list[int]] = {}
    for i, g in enumerate(groups):
        members.setdefault(g, []).append(i)
    chosen: list[int] = []
    for group in members.values():
        if len(chosen) + len(group) > limit:
            return chosen or group[:limit]
        chosen += group
    return chosen


def _scores(s: Mapping[str, float]) -> dict[str, float]:
    return {f"reward_{k}": float(s.get(k, 0.0)) for k in ("overall", "accuracy", "format")}


def rollout_rows(step: int, batch: "Rollout", advantages: Sequence[float] | None, limit: int) -> list[dict[str, Any]]:
    """Table rows for `limit` responses of `batch`. `advantages` holds each response's scalar advantage
    (its first response token's); None when the step trained on nothing (shown empty)."""
    rows = []
    for i in pick(batch.groups, limit):
        sample = batch.rows[i]
        rows.append({
            "step": step, "sample_id": str(sample.get("sample_id", "")), "group": batch.groups[i],
            "prompt": shorten(str(sample.get("problem", "")), PROMPT_CHARS),
            "response": shorten(batch.texts[i], RESPONSE_CHARS),
            "offline": bool(batch.offline[i]) if batch.offline else False,
            **_scores(batch.scores[i]),
            "advantage": round(float(advantages[i]), 4) if advantages is not None else None,  # read, not computed on
            "length": len(batch.responses[i]), "truncated": bool(batch.truncated[i]),
        })
    return rows


def validation_rows(step: int, samples: Sequence[Mapping], texts: Sequence[str], scores: Sequence[Mapping],
                    lengths: Sequence[int], limit: int) -> list[dict[str, Any]]:
    """Table rows for the first `limit` validation answers, with the expected answer beside each."""
    return [{"step": step, "sample_id": str(s.get("sample_id", "")),
             "prompt": shorten(str(s.get("problem", "")), PROMPT_CHARS), "answer": str(s.get("answer", "")),
             "response": shorten(t, RESPONSE_CHARS), **_scores(sc), "length": n}
            for s, t, sc, n in list(zip(samples, texts, scores, lengths))[:limit]]


class RolloutTables:
    """Keeps what the current step trained on (and validation's answers) until `flush(step)` hands the
    tables that are due to `sink`. A failing sink is logged, never fatal: a display must not stop a
    training run."""

    def __init__(self, sink: TableSink | None, every: int, limit: int):
        self.sink, self.every, self.limit = sink, every, limit
        self._step: tuple["Rollout", list[float] | None] | None = None
        self._validation: tuple | None = None

    @property
    def enabled(self) -> bool:
        return self.sink is not None and self.every > 0

    def saw_step(self, batch: "Rollout", advantages: list[float] | None) -> None:
        """The batch a step trained on (or everything generated, with None, when it trained on nothing)."""
        if self.enabled:
            self._step = (batch, advantages)

    def saw_validation(self, samples: Sequence[Mapping], texts: Sequence[str], scores: Sequence[Mapping],
                       lengths: Sequence[int]) -> None:
        if self.enabled:
            self._validation = (samples, texts, scores, lengths)

    def flush(self, step: int) -> None:
        """Send the rollout table when `step` is due, and the validation table whenever validation ran."""
        tables = []
        if self._step is not None and step % self.every == 0:
            tables.append((f"rollouts/step_{step:06d}.json", rollout_rows(step, *self._step, self.limit)))
        if self._validation is not None:
            tables.append((f"validation/step_{step:06d}.json", validation_rows(step, *self._validation, self.limit)))
        self._step = self._validation = None
        for name, rows in tables:
            try:
                self.sink(name, rows)
            except Exception:  # noqa: BLE001 - see the class docstring
                log.warning("could not log the table %s", name, exc_info=True)
