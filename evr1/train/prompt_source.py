"""Where training prompts come from: samples in a fixed, seeded order with a resumable cursor.

Two sources, one interface (`next_batch`, `peek`, `state`, `begin_step`, `observe`):

* `PromptSource`: every sample once per epoch, in a seeded permutation. The cursor (epoch,
  position) is all the data-loader state there is, so a resumed run draws exactly the prompts the
  uninterrupted run would have drawn.
* `StratifiedSource` (`data.stratify`): every batch holds each value of a sample field (the task
  family, a `synth_kind`, a source, …) in proportion to weights, equal by default, or following
  each value's share of groups with zero advantage (`weights: adaptive`), so that a family that
  teaches nothing takes less of the batch, never none of it. Each value has its own seeded stream;
  the per-value cursors, the quota remainders and the observed rates are the state, so a resumed
  run again draws exactly what the uninterrupted one would have.

`build(samples, seed=…, state=…, stratify=…, staleness=…)` makes the one the config asks for and
restores it from a checkpoint's `cursor` entry.
"""

from __future__ import annotations

import hashlib
import math
import threading
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from evr1.config.data import StratifyConfig
from evr1.data.ingest import reward_sample
from evr1.train.breakdown import family

FAMILY = "family"  # `data.stratify.by: family`: the task family of `evr1.train.breakdown.family`, not a field
_TIE = 1e-12  # zero-advantage test: a group whose rewards differ by no more than this teaches nothing


def stratum_of(row: Mapping[str, Any], by: str, setting: str = "data.stratify.by") -> str:
    """A row's value of the sample field `by` (`family`: its task family; else the field, read through
    `extra`), as a string; a row without it is refused, naming the sample, the field and `setting`."""
    if by == FAMILY:
        return family(row)
    fields = reward_sample(dict(row))
    value = fields.get(by)
    if value is None:
        raise ValueError(f"{setting}: sample {fields.get('sample_id', '?')!r} has no field "
                         f"{by!r} (fields: {sorted(fields)}); use a field every sample has, or 'family'")
    return str(value)


@dataclass
class Cursor:
    epoch: int = 0
    position: int = 0


def _require(samples: list[dict]) -> None:
    if not samples:
        raise ValueError("training has no samples: ingestion accepted none (see the rejects table)")


class PromptSource:
    """Every sample once per epoch, reshuffled (seeded) at each epoch boundary."""

    def __init__(self, samples: list[dict], *, seed: int, cursor: Cursor | None = None):
        _require(samples)
        self.samples = samples
        self.seed = seed
        self.cursor = cursor or Cursor()

    def _order(self, epoch: int) -> np.ndarray:
        return np.random.default_rng([self.seed, epoch]).permutation(len(self.samples))

    def next_batch(self, size: int) -> list[dict]:
        """The next `size` samples, reshuffled at each epoch boundary."""
        out = []
        while len(out) < size:
            order = self._order(self.cursor.epoch)
            take = min(size - len(out), len(order) - self.cursor.position)
            out.extend(self.samples[i] for i in order[self.cursor.position : self.cursor.position + take])
            self.cursor.position += take
            if self.cursor.position >= len(order):
                self.cursor = Cursor(self.cursor.epoch + 1, 0)
        return out

    def peek(self, size: int) -> list[dict]:
        """The samples the next `next_batch(size)` would return, without moving the cursor (for prefetch)."""
        saved = Cursor(self.cursor.epoch, self.cursor.position)
        try:
            return self.next_batch(size)
        finally:
            self.cursor = saved

    def state(self, draws: dict | None = None) -> dict:
        """What a checkpoint stores to resume from: the cursor. `draws`: a `state()` taken earlier,
        right after the checkpointed step's draws (a producer thread may have drawn further since)."""
        return dict(draws) if draws is not None else asdict(self.cursor)

    def begin_step(self, step: int) -> None:
        """The draws that follow are step `step`'s (only a stratified source's weights depend on it)."""

    def observe(self, step: int, zero_advantage_rates: Mapping[str, float]) -> None:
        """Step `step`'s share of zero-advantage groups per stratum (only adaptive weights use it)."""

    def stratum(self, row: Mapping[str, Any]) -> str:
        """The value a row is stratified by: a plain source has one stratum."""
        return "all"

    def metrics(self) -> dict[str, float]:
        """Per-step figures about the draws (`data/*`)."""
        return {}


@dataclass(frozen=True)
class Stratify:
    """How a `StratifiedSource` weighs the values of `by` (the config section `data.stratify`).

    `weights`: "equal", "adaptive", or a mapping value → relative weight (values it does not name
    weigh 1). Adaptive: value v weighs (1 − z̄_v) + `floor`, z̄_v the exponential moving average
    (factor `smoothing` per observed step, from 0) of its share of groups with zero advantage.
    """

    by: str
    weights: str | Mapping[str, float] = "equal"
    floor: float = 0.1
    smoothing: float = 0.1


def adaptive_weights(ema: Mapping[str, float], floor: float) -> dict[str, float]:
    """Normalised weights from smoothed zero-advantage rates: w_v ∝ (1 − z̄_v) + floor.

    A value whose every group has zero advantage (z̄ = 1) keeps `floor`: drawn less, never dropped,
    so a family can come back once the policy's answers start to differ again."""
    raw = {v: (1.0 - min(max(z, 0.0), 1.0)) + floor for v, z in ema.items()}
    total = sum(raw.values())
    return {v: w / total for v, w in raw.items()}


def smooth(ema: dict[str, float], observed: Mapping[str, float], factor: float) -> None:
    """One EMA step in place: z̄_v ← (1 − factor)·z̄_v + factor·z_v for each value observed."""
    for value in sorted(observed):
        if value in ema:
            ema[value] = (1.0 - factor) * ema[value] + factor * float(observed[value])


def apportion(size: int, weights: Mapping[str, float], credit: dict[str, float]) -> dict[str, int]:
    """How many of `size` prompts each value gets: size·w_v rounded so that the counts sum to `size`,
    the rounding errors carried over (`credit`, updated in place): after any number of batches, each
    value's total is within one prompt of the sum of its exact shares, even as the weights change.
    Largest remainder; ties go to the value first in sorted order."""
    for v in weights:
        credit[v] = credit.get(v, 0.0) + size * weights[v]
    quota = {v: max(0, math.floor(credit[v])) for v in weights}
    left = size - sum(quota.values())
    eligible = [v for v in weights if weights[v] > 0]  # a value weighted 0 is never drawn
    for v in sorted(eligible, key=lambda v: (-(credit[v] - quota[v]), v))[: max(left, 0)]:
        quota[v] += 1
    while sum(quota.values()) > size:  # only after float drift: take back from the most over-served
        v = min((v for v in quota if quota[v]), key=lambda v: (credit[v] - quota[v], v))
        quota[v] -= 1
    for v in weights:
        credit[v] -= quota[v]
    return quota


def _stream_key(value: str) -> int:
    """A value's own stream seed: from its text, so adding a value to the data moves no other stream."""
    return int.from_bytes(hashlib.blake2b(value.encode(), digest_size=4).digest(), "little")


class StratifiedSource(PromptSource):
    """Batches holding each value of a field in proportion to (equal, fixed or adaptive) weights.

    Each value v has its own seeded stream: its samples in a permutation per epoch of that value,
    with its own cursor, so a small family cycles faster than a large one. A batch of `size` takes
    `apportion(size, weights)` prompts from the streams and is shuffled (seeded by the batch count),
    so ranks do not each get one family.

    Adaptive weights and determinism: `observe(step, rates)` records step `step`'s rates;
    `begin_step(k)` makes the draws that follow use the rates of steps ≤ k − 1 − `delay`. With
    `delay` = 1 + the trainer's staleness, the rates a draw uses were always observed before it,
    in the synchronous and the asynchronous trainer alike, and `peek` (for step k + 1, at the end
    of step k's collection) sees the same weights the draw will: the batches are a function of the
    seed and the observations only, never of thread timing.
    """

    def __init__(self, samples: list[dict], *, seed: int, stratify: Stratify, delay: int = 1,
                 state: Mapping[str, Any] | None = None):
        _require(samples)
        if stratify.floor <= 0 or not 0 < stratify.smoothing <= 1:
            raise ValueError(f"data.stratify: floor must be > 0 and smoothing in (0, 1], got {stratify}")
        self.samples, self.seed, self.spec, self.delay = samples, seed, stratify, delay
        members: dict[str, list[int]] = defaultdict(list)
        for i, row in enumerate(samples):
            members[self.stratum(row)].append(i)
        self.values = sorted(members)
        self.members = dict(members)
        self._fixed = self._fixed_weights(stratify.weights)
        self._lock = threading.Lock()  # observe() runs on the trainer thread, draws on the producer's
        self._cursors = {v: Cursor() for v in self.values}
        self._credit = {v: 0.0 for v in self.values}
        self._batches = 0
        self._step = 0
        self._through = 0  # the last step whose rates are folded into the EMA
        self._ema = {v: 0.0 for v in self.values}
        self._log: dict[int, dict[str, float]] = {}  # every observed step's rates (the EMA is a fold of it)
        if state:
            self._restore(state)

    # -- what a row is stratified by ---------------------------------------------------------------

    def stratum(self, row: Mapping[str, Any]) -> str:
        """The row's value of `by` (`stratum_of`)."""
        return stratum_of(row, self.spec.by)

    def _fixed_weights(self, weights: str | Mapping[str, float]) -> dict[str, float] | None:
        if weights == "adaptive":
            return None
        if weights == "equal":
            given: Mapping[str, float] = {}
        elif isinstance(weights, Mapping):
            given = weights
        else:
            raise ValueError(f"data.stratify.weights: 'equal', 'adaptive' or a mapping value → weight, got {weights!r}")
        unknown = sorted(set(given) - set(self.values))
        if unknown:
            raise ValueError(f"data.stratify.weights names {unknown}, which no sample has as {self.spec.by!r} "
                             f"(values: {self.values})")
        raw = {v: float(given.get(v, 1.0)) for v in self.values}
        if any(not math.isfinite(w) or w < 0 for w in raw.values()) or sum(raw.values()) <= 0:
            raise ValueError(f"data.stratify.weights: finite, ≥ 0 and not all 0, got {raw}")
        total = sum(raw.values())
        return {v: w / total for v, w in raw.items()}

    # -- weights -------------------------------------------------------------------------------

    def weights(self) -> dict[str, float]:
        """Each value's share of the next batch (normalised)."""
        with self._lock:
            return dict(self._fixed) if self._fixed is not None else adaptive_weights(self._ema, self.spec.floor)

    def begin_step(self, step: int) -> None:
        with self._lock:
            self._step = step
            self._fold(step - 1 - self.delay)

    def _fold(self, through: int) -> None:
        """Fold the observed rates of steps (`_through`, `through`] into the EMA, in step order."""
        for s in sorted(k for k in self._log if self._through < k <= through):
            smooth(self._ema, self._log[s], self.spec.smoothing)
        self._through = max(self._through, through)

    def observe(self, step: int, zero_advantage_rates: Mapping[str, float]) -> None:
        """Record step `step`'s share of zero-advantage groups per value (values absent keep their EMA)."""
        rates = {str(v): float(r) for v, r in zero_advantage_rates.items() if str(v) in self._ema}
        if any(not 0.0 <= r <= 1.0 for r in rates.values()):
            raise ValueError(f"observe: zero-advantage rates lie in [0, 1], got {rates}")
        with self._lock:
            if step <= self._through:
                raise ValueError(f"observe: step {step}'s rates arrived after the weights of a later step were "
                                 f"fixed from steps ≤ {self._through}: call observe right after the step's update")
            self._log[step] = rates

    # -- drawing -------------------------------------------------------------------------------

    def _take(self, value: str, k: int) -> list[int]:
        """The next `k` sample indexes of `value`'s stream (its own seeded permutation per epoch)."""
        members, cursor, out = self.members[value], self._cursors[value], []
        while len(out) < k:
            order = np.random.default_rng([self.seed, 0, _stream_key(value), cursor.epoch]).permutation(len(members))
            take = min(k - len(out), len(members) - cursor.position)
            out.extend(members[i] for i in order[cursor.position : cursor.position + take])
            cursor.position += take
            if cursor.position >= len(members):
                cursor.epoch, cursor.position = cursor.epoch + 1, 0
        return out

    def next_batch(self, size: int) -> list[dict]:
        """`size` samples, each value's count by `apportion`, in a seeded shuffle."""
        weights = self.weights()
        with self._lock:
            quota = apportion(size, weights, self._credit)
            picked = [i for v in self.values for i in self._take(v, quota[v])]
            self._batches += 1
            order = np.random.default_rng([self.seed, 1, self._batches]).permutation(len(picked))
        return [self.samples[picked[j]] for j in order]

    def peek(self, size: int) -> list[dict]:
        """What the next step's `next_batch(size)` returns (the step after the current one), without
        moving anything (for prefetch)."""
        saved = self._snapshot()
        try:
            self.begin_step(self._step + 1)
            return self.next_batch(size)
        finally:
            self._load_draws(saved)

    # -- state -------------------------------------------------------------------------------------

    @property
    def cursor(self) -> Cursor:
        """For the `data/epoch` metric: the fewest full passes over any value's samples."""
        with self._lock:
            return Cursor(min(c.epoch for c in self._cursors.values()), self._batches)

    def _snapshot(self) -> dict[str, Any]:
        with self._lock:
            return {"by": self.spec.by, "values": list(self.values),
                    "cursors": {v: [c.epoch, c.position] for v, c in self._cursors.items()},
                    "credit": dict(self._credit), "batches": self._batches, "step": self._step,
                    "through": self._through, "ema": dict(self._ema)}

    def _load_draws(self, draws: Mapping[str, Any]) -> None:
        with self._lock:
            self._cursors = {v: Cursor(int(e), int(p)) for v, (e, p) in draws["cursors"].items()}
            self._credit = {v: float(c) for v, c in draws["credit"].items()}
            self._batches, self._step = int(draws["batches"]), int(draws["step"])
            self._through, self._ema = int(draws["through"]), {v: float(z) for v, z in draws["ema"].items()}

    def state(self, draws: dict | None = None) -> dict:
        """The draw position (`draws`, a `state()` taken right after the checkpointed step's draws, or
        now) and every observation made so far: at a checkpoint of step k the trainer has observed
        steps ≤ k, which a resumed run never observes again, while a producer thread may already
        have drawn past k."""
        position = draws["stratified"] if draws is not None else self._snapshot()
        with self._lock:
            log = {str(s): dict(r) for s, r in sorted(self._log.items())}
        return {"stratified": {**{k: v for k, v in position.items() if k != "ema"}, "observed": log}}

    def _restore(self, state: Mapping[str, Any]) -> None:
        s = state.get("stratified")
        if s is None:
            raise ValueError("resume: the checkpoint's data cursor is a plain one, but data.stratify is set now; "
                             "a stratified run resumes only from a stratified checkpoint (or start afresh)")
        if s["by"] != self.spec.by or list(s["values"]) != self.values:
            raise ValueError(f"resume: the checkpoint stratified by {s['by']!r} over {s['values']}, the config and "
                             f"data now by {self.spec.by!r} over {self.values}")
        self._log = {int(k): {v: float(r) for v, r in rates.items()} for k, rates in s["observed"].items()}
        through = int(s["through"])
        self._load_draws({**s, "through": 0, "ema": {v: 0.0 for v in self.values}})
        with self._lock:
            self._fold(through)  # the EMA is a fold of the log: recomputed, bit for bit the same

    def metrics(self) -> dict[str, float]:
        """`data/stratum_weight/<value>`: each value's share of the next batch."""
        return {f"data/stratum_weight/{v}": w for v, w in self.weights().items()}


def zero_advantage_rates(rows: Sequence[Mapping[str, Any]], groups: Sequence[int], rewards: Sequence[float],
                         stratum: Callable[[Mapping[str, Any]], str]) -> dict[str, float]:
    """Per stratum, the share of groups (one prompt's responses) whose rewards are all equal: under
    group-normalised advantages (GRPO, RLOO, Dr. GRPO) exactly the groups with zero advantage, which
    teach nothing. `rows[i]`, `groups[i]`, `rewards[i]` describe response i."""
    spread: dict[int, list[float]] = {}
    owner: dict[int, str] = {}
    for row, group, reward in zip(rows, groups, rewards, strict=True):
        spread.setdefault(group, []).append(float(reward))
        owner.setdefault(group, stratum(row))
    zero: dict[str, list[bool]] = defaultdict(list)
    for group, values in spread.items():
        zero[owner[group]].append(max(values) - min(values) <= _TIE)
    return {v: float(np.mean(flags)) for v, flags in sorted(zero.items())}


def build(samples: list[dict], *, seed: int, state: Mapping[str, Any] | None = None,
          stratify: StratifyConfig | None = None, staleness: int = 0) -> PromptSource:
    """The source the config asks for (`stratify`: the `data.stratify` section or None), restored
    from a checkpoint's `cursor` entry (`state`; empty or None: from the start)."""
    if stratify is None:
        if state and "stratified" in state:
            raise ValueError("resume: the checkpoint's data cursor is stratified, but data.stratify is not set now")
        return PromptSource(samples, seed=seed, cursor=Cursor(**state) if state else None)
    spec = Stratify(by=stratify.by, weights=stratify.weights, floor=stratify.floor, smoothing=stratify.smoothing)
    return StratifiedSource(samples, seed=seed, stratify=spec, delay=1 + staleness, state=state or None)
