"""Prompt sources (evr1/train/prompt_source.py): the plain seeded order, and batches stratified by a
sample field with equal, fixed or adaptive weights; every one a function of the seed (and the
observed rates) that a source restored from its checkpointed state continues exactly."""

from __future__ import annotations

import json
import threading
from collections import Counter

import numpy as np
import pytest

from evr1.config.data import StratifyConfig
from evr1.train.prompt_source import (
    Cursor,
    PromptSource,
    StratifiedSource,
    Stratify,
    adaptive_weights,
    apportion,
    build,
    smooth,
    zero_advantage_rates,
)

# Unequal families, as a real mix is: 30 colour, 12 motion, 6 appears; synth_kind lives in `extra`
# as it does in the Lance samples table.
SIZES = {"colour": 30, "motion": 12, "appears": 6}


def _rows(sizes: dict[str, int] = SIZES) -> list[dict]:
    rows = []
    for kind, n in sizes.items():
        for i in range(n):
            rows.append({"sample_id": f"{kind}-{i}", "problem_type": "multiple choice",
                         "extra": json.dumps({"synth_kind": kind})})
    return rows


def _ids(batch: list[dict]) -> list[str]:
    return [r["sample_id"] for r in batch]


def _kinds(batch: list[dict]) -> Counter:
    return Counter(r["sample_id"].rsplit("-", 1)[0] for r in batch)


def _roundtrip(state: dict) -> dict:
    return json.loads(json.dumps(state))  # what a checkpoint's trainer_state.json holds


# --- the plain source ------------------------------------------------------------------------------


def test_plain_source_covers_every_sample_once_per_epoch_and_resumes_exactly():
    rows = _rows()
    src = PromptSource(rows, seed=3)
    first = [_ids(src.next_batch(16)) for _ in range(3)]  # 48 = one epoch
    assert sorted(i for ids in first for i in ids) == sorted(_ids(rows))
    saved = _roundtrip(src.state())
    assert saved == {"epoch": 1, "position": 0}
    after = [_ids(src.next_batch(7)) for _ in range(5)]
    again = build(rows, seed=3, state=saved)
    assert type(again) is PromptSource
    assert [_ids(again.next_batch(7)) for _ in range(5)] == after
    assert _ids(PromptSource(rows, seed=3).next_batch(16)) == first[0]  # deterministic in the seed
    assert _ids(PromptSource(rows, seed=4).next_batch(16)) != first[0]


# --- stratified: the weights' math ------------------------------------------------------------------


def test_apportion_rounds_each_batch_and_carries_the_remainder_exactly():
    credit: dict[str, float] = {}
    thirds = {"a": 1 / 3, "b": 1 / 3, "c": 1 / 3}
    quotas = [apportion(16, thirds, credit) for _ in range(3)]
    # 16/3 = 5⅓ each: one value gets 6 per batch, a different one each time; 3 batches = 16 each.
    assert [sorted(q.values()) for q in quotas] == [[5, 5, 6]] * 3
    assert [max(q, key=q.get) for q in quotas] == ["a", "b", "c"]
    assert sum((Counter(q) for q in quotas), Counter()) == {"a": 16, "b": 16, "c": 16}
    # Unequal weights: 10 × 0.7 = 7 and 10 × 0.3 = 3 exactly, every batch.
    credit = {}
    assert [apportion(10, {"x": 0.7, "y": 0.3}, credit) for _ in range(4)] == [{"x": 7, "y": 3}] * 4
    # Weights that change every batch (adaptive): each total stays within one prompt of its exact share.
    rng = np.random.default_rng(0)
    credit, total, exact = {}, Counter(), Counter()
    for _ in range(500):
        raw = rng.random(4) + 0.05
        w = dict(zip("abcd", raw / raw.sum()))
        q = apportion(13, w, credit)
        assert sum(q.values()) == 13 and min(q.values()) >= 0
        total.update(q)
        exact.update({v: 13 * x for v, x in w.items()})
        assert all(abs(total[v] - exact[v]) < 1 for v in "abcd")
    # A weight of 0 is never drawn, however the remainders fall.
    credit = {}
    assert all(apportion(3, {"x": 1.0, "y": 0.0}, credit)["y"] == 0 for _ in range(5))


def test_adaptive_weights_follow_one_minus_the_zero_advantage_rate_plus_the_floor():
    # (1 − z) + floor with floor 0.1: 1.1, 0.6, 0.1 → over a total of 1.8.
    w = adaptive_weights({"colour": 0.0, "motion": 0.5, "appears": 1.0}, floor=0.1)
    assert w == pytest.approx({"colour": 1.1 / 1.8, "motion": 0.6 / 1.8, "appears": 0.1 / 1.8})
    # The floor: a family that teaches nothing (every group zero-advantage) is drawn less, never 0;
    # if every family is collapsed they are equal again.
    assert adaptive_weights({"a": 1.0, "b": 0.0}, floor=0.25)["a"] == pytest.approx(0.25 / 1.5)
    assert adaptive_weights({"a": 1.0, "b": 1.0}, floor=0.1) == pytest.approx({"a": 0.5, "b": 0.5})
    # The moving average: z̄ ← 0.9·z̄ + 0.1·z, values not observed keep theirs.
    ema = {"a": 0.0, "b": 0.5}
    smooth(ema, {"a": 1.0}, 0.1)
    smooth(ema, {"a": 1.0}, 0.1)
    assert ema == pytest.approx({"a": 0.19, "b": 0.5})


def test_zero_advantage_rates_count_groups_whose_rewards_are_all_equal():
    rows = [{"k": "x"}] * 4 + [{"k": "y"}] * 4
    groups = [0, 0, 1, 1, 2, 2, 3, 3]
    rewards = [1.0, 1.0, 0.0, 1.0, 0.1, 0.1, 0.1, 0.1]  # x: one flat group of two; y: both flat
    assert zero_advantage_rates(rows, groups, rewards, lambda r: r["k"]) == {"x": 0.5, "y": 1.0}


# --- stratified: the batches ---------------------------------------------------------------------------


def test_every_batch_holds_each_family_in_equal_shares_whatever_its_size():
    src = StratifiedSource(_rows(), seed=0, stratify=Stratify(by="synth_kind"))
    assert src.values == ["appears", "colour", "motion"]
    seen: Counter = Counter()
    for _ in range(20):  # 20 × 12 = 240 draws: appears' 6 samples cycle 13 times, colour's 30 under 3
        batch = src.next_batch(12)
        assert _kinds(batch) == {"appears": 4, "colour": 4, "motion": 4}
        seen.update(_ids(batch))
    # Within a family every sample comes up as often as the others (±1: the current epoch).
    for kind, n in SIZES.items():
        counts = [seen[f"{kind}-{i}"] for i in range(n)]
        assert max(counts) - min(counts) <= 1, (kind, counts)
    # A batch that does not divide: 16 = 5⅓ × 3, never more than one off the share.
    src = StratifiedSource(_rows(), seed=0, stratify=Stratify(by="family"))  # family = synth_kind here
    for _ in range(6):
        assert sorted(_kinds(src.next_batch(16)).values()) == [5, 5, 6]


def test_fixed_weights_and_the_family_value():
    src = build(_rows(), seed=1, stratify=StratifyConfig(by="family", weights={"colour": 2, "motion": 1, "appears": 1}))
    for _ in range(5):
        assert _kinds(src.next_batch(8)) == {"colour": 4, "motion": 2, "appears": 2}
    with pytest.raises(ValueError, match="nope"):
        StratifiedSource(_rows(), seed=1, stratify=Stratify(by="family", weights={"nope": 1.0}))
    with pytest.raises(ValueError, match="has no field 'data_source'"):
        StratifiedSource(_rows(), seed=1, stratify=Stratify(by="data_source"))


def test_stratified_batches_are_a_function_of_the_seed_and_resume_exactly():
    rows = _rows()
    spec = StratifyConfig(by="synth_kind")
    src = build(rows, seed=7, stratify=spec)
    for step in range(1, 6):
        src.begin_step(step)
        src.next_batch(10)
    saved = _roundtrip(src.state())
    after = []
    for step in range(6, 12):
        src.begin_step(step)
        after.append(_ids(src.next_batch(10)))
    again = build(rows, seed=7, state=saved, stratify=spec)
    replay = []
    for step in range(6, 12):
        again.begin_step(step)
        replay.append(_ids(again.next_batch(10)))
    assert replay == after
    fresh = build(rows, seed=7, stratify=spec)
    fresh.begin_step(1)
    other = build(rows, seed=8, stratify=spec)
    other.begin_step(1)
    assert _ids(fresh.next_batch(10)) != _ids(other.next_batch(10))
    # A changed config refuses the checkpoint instead of drawing something else.
    with pytest.raises(ValueError, match="stratified"):
        build(rows, seed=7, state=saved)
    with pytest.raises(ValueError, match="plain"):
        build(rows, seed=7, state={"epoch": 1, "position": 3}, stratify=spec)
    with pytest.raises(ValueError, match="data_source"):
        build([{**r, "data_source": "x"} for r in rows], seed=7, state=saved, stratify=StratifyConfig(by="data_source"))


def _adaptive_run(rows, spec, steps, *, state=None, start=1, delay=1):
    """Steps `start..steps` of a trainer that observes each step's (made-up, deterministic) rates."""
    src = StratifiedSource(rows, seed=11, stratify=spec, delay=delay, state=state)
    out = []
    for step in range(start, steps + 1):
        src.begin_step(step)
        batch = src.next_batch(12)
        out.append(_ids(batch))
        rates = {"colour": 1.0, "motion": 0.5 if step % 2 else 0.25, "appears": 0.0}  # colour teaches nothing
        src.observe(step, rates)
    return src, out


def test_adaptive_weights_shift_the_batches_and_resume_exactly():
    rows = _rows()
    spec = Stratify(by="synth_kind", weights="adaptive", floor=0.1, smoothing=0.5)
    src, full = _adaptive_run(rows, spec, 12)
    # Step 1 and 2 draw before any rate counts (delay 1: step k uses steps ≤ k − 2): equal shares.
    assert _kinds([{"sample_id": i} for i in full[0]]) == {"colour": 4, "motion": 4, "appears": 4}
    # Later, colour (zero advantage everywhere) falls towards its floor and appears takes its place.
    late = Counter()
    for ids in full[-4:]:
        late.update(_kinds([{"sample_id": i} for i in ids]))
    assert late["colour"] < late["motion"] < late["appears"]
    assert late["colour"] > 0  # the floor keeps it in the batches
    # The weights are the formula on the moving averages of the observed rates, folded through step 10.
    ema = {"appears": 0.0, "colour": 0.0, "motion": 0.0}
    for step in range(1, 11):
        smooth(ema, {"colour": 1.0, "motion": 0.5 if step % 2 else 0.25, "appears": 0.0}, 0.5)
    src.begin_step(12)
    assert src.weights() == pytest.approx(adaptive_weights(ema, 0.1))
    # A resume from step 6's checkpoint draws steps 7..12 exactly as the uninterrupted run did.
    part, _ = _adaptive_run(rows, spec, 6)
    saved = _roundtrip(part.state())
    _, rest = _adaptive_run(rows, spec, 12, state=saved, start=7)
    assert rest == full[6:]


def test_peek_sees_the_next_steps_batch_and_moves_nothing():
    """The trainer prefetches `peek` at the end of step k's collection, before step k's rates are
    observed; with adaptive weights the draw for step k + 1 must still be what peek saw."""
    spec = Stratify(by="synth_kind", weights="adaptive", floor=0.1, smoothing=0.5)
    src = StratifiedSource(_rows(), seed=2, stratify=spec)
    ahead = _ids(src.peek(12))
    for step in range(1, 10):
        src.begin_step(step)
        assert _ids(src.next_batch(12)) == ahead, step
        before = src.state()
        ahead = _ids(src.peek(12))
        assert src.state() == before and _ids(src.peek(12)) == ahead
        src.observe(step, {"colour": 1.0, "motion": 0.0, "appears": 0.5})
    assert src.weights()["colour"] < src.weights()["motion"]  # the weights did move meanwhile


def test_a_checkpoint_merges_the_draw_position_with_every_observation_so_far():
    """Asynchronous trainer (staleness 1, so delay 2): the cursor saved with step k is the producer's
    snapshot right after step k's draws, while step k's rates are observed later and a producer may
    have drawn step k + 1 meanwhile; the saved state has the snapshot's position and every rate."""
    rows = _rows()
    spec = Stratify(by="synth_kind", weights="adaptive", floor=0.1, smoothing=0.5)

    def rates(step: int) -> dict[str, float]:
        if step == 5:
            return {"colour": 0.0, "motion": 1.0, "appears": 1.0}
        return {"colour": 1.0, "motion": 0.5, "appears": 0.0}

    def draw(src: StratifiedSource, step: int) -> list[str]:
        src.begin_step(step)
        return _ids(src.next_batch(12))

    uninterrupted = StratifiedSource(rows, seed=11, stratify=spec, delay=2)
    expected = {}
    for step in range(1, 10):
        expected[step] = draw(uninterrupted, step)
        uninterrupted.observe(step, rates(step))

    src = StratifiedSource(rows, seed=11, stratify=spec, delay=2)
    for step in range(1, 5):
        draw(src, step)
        src.observe(step, rates(step))
    draw(src, 5)
    snapshot = src.state()  # Collected.cursor of step 5
    draw(src, 6)  # the producer runs one step ahead
    src.observe(5, rates(5))  # the trainer finishes step 5, then checkpoints it
    saved = _roundtrip(src.state(snapshot))
    assert saved["stratified"]["batches"] == 5 and sorted(saved["stratified"]["observed"]) == list("12345")

    resumed = StratifiedSource(rows, seed=11, stratify=spec, delay=2, state=saved)
    for step in range(6, 10):  # step 8 is the first whose weights use step 5's rates
        assert draw(resumed, step) == expected[step], step
        resumed.observe(step, rates(step))
    # Without step 5's rates (the snapshot alone) step 8 onwards would differ: they do matter.
    alone = StratifiedSource(rows, seed=11, stratify=spec, delay=2, state=_roundtrip(snapshot))
    drawn = {}
    for step in range(6, 10):
        drawn[step] = draw(alone, step)
        alone.observe(step, rates(step))
    assert drawn[6] == expected[6] and any(drawn[s] != expected[s] for s in (8, 9))
    with pytest.raises(ValueError, match="after the weights"):
        resumed.observe(3, {"colour": 0.0})  # too late: later steps' weights already used steps ≤ 3


def test_draws_and_observations_from_two_threads():
    src = StratifiedSource(_rows(), seed=0, stratify=Stratify(by="synth_kind", weights="adaptive"))
    errors = []

    def produce():
        try:
            for step in range(1, 200):
                src.begin_step(step)
                src.next_batch(6)
                src.peek(6)
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    thread = threading.Thread(target=produce)
    thread.start()
    for step in range(1, 200):
        src.observe(10_000 + step, {"colour": 0.5})  # far ahead of any fold: never too late
        src.metrics()
    thread.join()
    assert not errors
    assert sum(src.weights().values()) == pytest.approx(1.0)


def test_the_plain_source_takes_the_same_calls():
    src = build(_rows(), seed=0)
    src.begin_step(1)
    src.observe(1, {"all": 1.0})
    assert src.metrics() == {} and src.stratum({}) == "all"
    assert src.state({"epoch": 2, "position": 5}) == {"epoch": 2, "position": 5}
    assert isinstance(src.cursor, Cursor)
