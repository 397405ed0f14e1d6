"""The driver's side of the entropy bonus: which tokens it covers, and the coefficients that hold an
entropy floor, for the whole batch or per value of a sample field (`algorithm.entropy_target_by`).

The rank's side is one term of `evr1.train.workers.update_loss`: coefficient × Σ (weight · entropy)
over the mini-batch's tokens ÷ the number of responses it counts. The driver decides the weights
(the answer's tokens, `answer_weights`), the coefficient and the count:

* one controller (`entropy_target` alone): 0/1 weights, the controller's coefficient, and the
  responses with an answer counted (`make_shards`' default);
* one controller per stratum (`entropy_target_by`): each response's weights carry its stratum's
  coefficient, the shard's coefficient is 1, and every response with an answer is counted, also one
  whose stratum's coefficient is 0. A response's bonus is then what the single controller would give
  it at its stratum's coefficient: a family that hardened is pushed back up towards the floor while a
  family whose answers still vary (and so carry advantage) is left alone. One target over all
  families cannot do that: the varied families hold the batch's mean above it (docs/learning.md).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from evr1 import rl
from evr1.config.train import AlgorithmConfig
from evr1.train.prompt_source import stratum_of

__all__ = ["EntropyControl", "answer_weights", "covered_entropy"]

Span = tuple[int, int] | None


def answer_weights(lengths: Sequence[int], spans: Sequence[Span]) -> list[list[float]]:
    """Per response, 1.0 at the tokens that write its answer's content (`spans`, from
    `diagnostics.answer_token_span`: the tag the reward reads), 0.0 elsewhere; all zeros without one."""
    return [[1.0 if span and span[0] <= i < span[1] else 0.0 for i in range(n)] for n, span in zip(lengths, spans, strict=True)]


def covered_entropy(entropies: Sequence[Sequence[float] | None], weights: Sequence[Sequence[float]] | None) -> float | None:
    """What the bonus measures, from the update's per-token entropies (its first epoch; with one
    mini-batch, the policy before the step):
    without `weights`, the mean over every response token; with them, the answer's entropy, each
    response's weighted tokens summed (by the chain rule, over samples, the entropy of the answer as a
    whole: a letter, or an interval's two numbers and the fixed characters around them alike), the
    mean over the responses that have any. None when nothing readable is covered."""
    total, count = 0.0, 0
    for k, values in enumerate(entropies):
        if values is None:  # a response its rank could not read: no entropy, no bonus
            continue
        if weights is None:
            total, count = total + sum(values), count + len(values)
        elif any(weights[k]):
            total, count = total + sum(v * x for v, x in zip(values, weights[k], strict=True)), count + 1
    return total / count if count else None


class EntropyControl:
    """The adaptive coefficient(s) of a run with an `entropy_target`: one `rl.AdaptiveEntropyCoefficient`,
    or one per value of the sample field `entropy_target_by` (made when the value is first seen, each
    at `entropy_coeff`). `state()` is what a checkpoint keeps; constructed with it, a resumed run continues."""

    def __init__(self, a: AlgorithmConfig, state: Mapping[str, Any] | None = None) -> None:
        if a.entropy_target is None:
            raise ValueError("EntropyControl needs algorithm.entropy_target")
        self.by = a.entropy_target_by
        self._new: Callable[[Mapping | None], rl.AdaptiveEntropyCoefficient] = (
            lambda s: rl.AdaptiveEntropyCoefficient.from_state(a.entropy_target, a.entropy_coeff_delta,
                                                               a.entropy_coeff_max, s, a.entropy_coeff))
        stored = None if state is None else (state.get("by", "?") if "strata" in state else None)
        if state is not None and stored != self.by:
            raise ValueError(f"the checkpoint's entropy control is {'per ' + repr(stored) if stored else 'one coefficient'}, "
                             f"algorithm.entropy_target_by is {self.by!r}: resume with the setting it was saved with")
        self.strata = ({"": self._new(state)} if self.by is None
                       else {v: self._new(s) for v, s in (state or {}).get("strata", {}).items()})

    def _key(self, row: Mapping[str, Any]) -> str:
        return "" if self.by is None else stratum_of(row, self.by, "algorithm.entropy_target_by")

    def _of(self, key: str) -> rl.AdaptiveEntropyCoefficient:
        if key not in self.strata:
            self.strata[key] = self._new(None)
        return self.strata[key]

    def plan(self, rows: Sequence[Mapping[str, Any]], weights: list[list[float]] | None
             ) -> tuple[list[list[float]] | None, float, list[bool] | None]:
        """(per-token weights, the shard's coefficient, the responses the mean counts or None for
        make_shards' default) for this step's update, from the covered tokens' 0/1 `weights`."""
        if self.by is None or weights is None:
            return weights, self.strata[""].value, None
        coeffs = [self._of(self._key(row)).value for row in rows]
        return ([[c * w for w in ws] for c, ws in zip(coeffs, weights, strict=True)], 1.0,
                [any(ws) for ws in weights])

    def observe(self, rows: Sequence[Mapping[str, Any]], entropies: Sequence[Sequence[float] | None],
                weights: list[list[float]] | None) -> dict[str, float]:
        """Adapt each coefficient to the entropy the update measured on its tokens (`covered_entropy`),
        and the step's metrics: `actor/entropy_coeff` (the coefficient used; per stratum, their mean over
        the covered responses), `actor/entropy_covered`, and per stratum `…/<value>` of both."""
        measured = covered_entropy(entropies, weights)
        metrics = {} if measured is None else {"actor/entropy_covered": measured}
        if self.by is None or weights is None:
            ctrl = self.strata[""]
            metrics["actor/entropy_coeff"] = ctrl.value
            ctrl.update(measured)
            return metrics
        members: dict[str, list[int]] = {}
        for i, row in enumerate(rows):
            members.setdefault(self._key(row), []).append(i)
        used: list[float] = []
        for key, idx in sorted(members.items()):
            ctrl = self._of(key)
            metrics[f"actor/entropy_coeff/{key}"] = ctrl.value
            used += [ctrl.value for i in idx if any(weights[i])]
            value = covered_entropy([entropies[i] for i in idx], [weights[i] for i in idx])
            if value is not None:
                metrics[f"actor/entropy_covered/{key}"] = value
            ctrl.update(value)
        metrics["actor/entropy_coeff"] = sum(used) / len(used) if used else 0.0
        return metrics

    def state(self) -> dict[str, Any]:
        """One controller's two floats; per stratum, `{"by": field, "strata": {value: its two floats}}`."""
        if self.by is None:
            return self.strata[""].state()
        return {"by": self.by, "strata": {k: c.state() for k, c in sorted(self.strata.items())}}
