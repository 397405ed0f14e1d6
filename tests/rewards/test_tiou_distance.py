"""Temporal grounding's distance-penalised training reward (Time-R1's tIoU, `reward.grounding:
tiou_distance`): the formula, and that it reaches `overall` only, so validation and the held-out
metric (plain IoU in `accuracy`) are unchanged."""

from __future__ import annotations

import json

import numpy as np
import pytest

from evr1 import eval as evr1_eval
from evr1 import rewards
from evr1.config.train import RewardConfig
from evr1.data.synth_media import Canvas
from evr1.data.synth_tasks import kind_appears
from evr1.rewards.grounding import distance_penalised_iou, interval_iou

from .conftest import sample, tagged

TIOU = {"temporal grounding": "tiou_distance"}


def _time(s: float, e: float) -> str:
    return json.dumps({"time": [s, e]})


@pytest.mark.parametrize(
    ("predicted", "truth", "duration", "expected"),
    [
        # IoU 1/2; start exact; end 1 s off over 4 s: 1/2 · 1 · 3/4.
        ((0, 2), (0, 1), 4.0, 0.375),
        # IoU 5/15; both ends 5 s off over 100 s: 1/3 · 0.95 · 0.95.
        ((10, 20), (15, 25), 100.0, (1 / 3) * 0.95 * 0.95),
        # The whole 4 s clip against its last second: IoU 1/4 · (1 − 3/4) · 1.
        ((0, 4), (3, 4), 4.0, 0.0625),
        # No duration: normalised by max(e, ê) = 2, so 1/2 · 1 · (1 − 1/2).
        ((0, 2), (0, 1), None, 0.25),
        ((0, 2), (0, 1), float("nan"), 0.25),
        # A miss stays 0 however near; a hit is 1 with or without the duration.
        ((1, 2), (0, 1), 4.0, 0.0),
        ((3.5, 7), (3.5, 7), 60.0, 1.0),
        ((3.5, 7), (3.5, 7), None, 1.0),
        # An end more than the duration away: its factor is clipped at 0 (Time-R1's would be < 0).
        ((-10, 1), (0, 1), 4.0, 0.0),
    ],
)
def test_the_formula_on_hand_computed_cases(predicted, truth, duration, expected):
    assert distance_penalised_iou(predicted, truth, duration) == pytest.approx(expected)


def test_it_reaches_overall_only_and_accuracy_stays_plain_iou(score):
    item = sample("temporal grounding", _time(0, 1), duration=4.0)
    response = tagged(_time(0, 2))
    plain = score(response, item)
    shaped = score(response, item, shaping=TIOU)
    assert plain == {"overall": pytest.approx(0.9 * 0.5 + 0.1), "accuracy": 0.5, "format": 1.0}
    assert shaped == {"overall": pytest.approx(0.9 * 0.375 + 0.1), "accuracy": 0.5, "format": 1.0}
    # Perfect: the same under both. A spoken range counts for accuracy (format 0.5) under both too.
    assert score(tagged(_time(0, 1)), item, shaping=TIOU) == score(tagged(_time(0, 1)), item) == {
        "overall": 1.0, "accuracy": 1.0, "format": 1.0}
    spoken = tagged("from 0 to 2 seconds")
    assert score(spoken, item, shaping=TIOU)["overall"] == pytest.approx(0.9 * 0.375 + 0.05)
    # Other families ignore it; aliases and every spelling of the family reach it.
    mc = sample("multiple choice", "B", options=["A. red", "B. blue"])
    assert score(tagged("B"), mc, shaping=TIOU) == score(tagged("B"), mc)
    assert score(response, item, shaping={"Moment_Retrieval": "tiou_distance"}) == shaped


def test_batch_scoring_inline_and_pooled_agree():
    items = [sample("temporal grounding", _time(s, s + 1), duration=4.0) for s in range(4)]
    responses = [tagged(_time(0, 2))] * 4
    inline = rewards.compute_scores(responses, items, shaping=TIOU)
    pooled = rewards.compute_scores(responses, items, workers=2, chunk_size=1, shaping=TIOU)
    assert inline.scores == pooled.scores
    assert [s["overall"] for s in inline.scores] == pytest.approx([0.9 * 0.375 + 0.1] * 2 + [0.1] * 2)
    assert [s["accuracy"] for s in inline.scores] == [0.5, 0.5, 0.0, 0.0]
    assert rewards.compute_scores(responses, items).scores != inline.scores  # the default is plain IoU


def test_unknown_shapings_are_refused():
    with pytest.raises(ValueError, match="no training reward 'nope'"):
        rewards.compute_scores([""], [sample("temporal grounding", _time(0, 1))],
                               shaping={"temporal grounding": "nope"})
    with pytest.raises(ValueError, match="no such family"):
        rewards.compute_score("", {}, shaping={"no family": "tiou_distance"})
    assert rewards.shapings("moment retrieval") == ["tiou_distance"]
    assert rewards.check_shaping({"Temporal-Grounding": "tiou_distance"}) == (("temporal grounding", "tiou_distance"),)


def test_config_option_is_training_only_and_off_by_default():
    assert RewardConfig().grounding == "iou" and RewardConfig().shaping() == {}
    assert RewardConfig(grounding="tiou_distance").shaping() == TIOU
    with pytest.raises(ValueError):
        RewardConfig(grounding="giou")


def _appears_items() -> list[dict]:
    """The `appears` family as conf/learning.yaml makes it: a 4 s clip (8 frames at 2 fps) cut into
    four one-second intervals, the circle in one; duration as the synthetic records carry it."""
    geo = Canvas(width=56, height=56, fps=2, frames=8)
    items, rng = {}, np.random.default_rng(0)
    while len(items) < 4:  # one item per answer
        item = kind_appears(geo, rng)
        items[item.answer] = {"problem_type": item.problem_type, "answer": item.answer,
                              "answer_space": item.answer_space, "duration": geo.frames / geo.fps}
    return [items[k] for k in sorted(items)]


def _expected(answer: str, items: list[dict], shaping: dict | None) -> float:
    """The training reward (the part of `overall` that accuracy has without shaping) of always
    giving `answer`, over items whose answers are uniform over the answer space."""
    return float(np.mean([(rewards.compute_score(tagged(answer), it, shaping=shaping)["overall"] - 0.1) / 0.9
                          for it in items]))


def test_on_appears_a_hedge_now_scores_below_a_guess_where_plain_iou_ties():
    items = _appears_items()
    space = items[0]["answer_space"]
    assert [json.loads(a)["time"] for a in space] == [[0, 1], [1, 2], [2, 3], [3, 4]]
    guess = {name: float(np.mean([_expected(a, items, shaping) for a in space]))
             for name, shaping in (("iou", None), ("tiou", TIOU))}
    assert guess == pytest.approx({"iou": 0.25, "tiou": 0.25})  # a guess is right 1 time in 4, wrong ones score 0
    hedges = [_time(s, s + 2) for s in (0, 1, 2)] + [_time(0, 3), _time(1, 4), _time(0, 4)]
    for hedge in hedges:
        # Plain IoU: covering m seconds is 1/m on m of the 4 answers, 1/4 in expectation, as a guess.
        assert _expected(hedge, items, None) == pytest.approx(0.25), hedge
        assert _expected(hedge, items, TIOU) < guess["tiou"], hedge
    # Two-second hedges: 1/2 · 3/4 on two of four answers, 0.1875; the whole clip, 0.078.
    assert _expected(_time(0, 2), items, TIOU) == pytest.approx(0.1875)
    assert _expected(_time(1, 3), items, TIOU) == pytest.approx(0.1875)
    assert _expected(_time(0, 4), items, TIOU) == pytest.approx((0.0625 + 0.09375 * 2 + 0.0625) / 4)
    # The held-out metric still sees the hedge at chance: the benchmark scores plain IoU.
    for i, item in enumerate(items):
        record = {**item, "id": f"appears-{i}", "path": f"videos/appears-{i}.mp4"}
        assert evr1_eval.score("heldout", tagged(_time(0, 2)), record) == pytest.approx(
            interval_iou((0, 2), tuple(json.loads(item["answer"])["time"])))
