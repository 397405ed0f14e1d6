"""Grounding: temporal, spatial, spatial-temporal and tracking.

IoUs use continuous coordinates: [10, 20] vs [15, 25] overlap 5 over a union of 15 → 1/3.
"""

from __future__ import annotations

import json

import pytest

from evr1.rewards.grounding import box_iou, interval_iou, spoken_interval

from .conftest import sample, tagged


def test_iou_formulas():
    assert interval_iou((10, 20), (15, 25)) == pytest.approx(5 / 15)
    assert interval_iou((0, 1), (2, 3)) == 0.0
    assert interval_iou((5, 5), (5, 5)) == 0.0  # no length, no union
    # [0,0,10,10] vs [5,5,15,15]: 25 in common, union 100 + 100 − 25 = 175.
    assert box_iou((0, 0, 10, 10), (5, 5, 15, 15)) == pytest.approx(25 / 175)
    assert box_iou((0, 0, 10, 10), (0, 0, 10, 10)) == 1.0


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("from 10 to 20 seconds", (10.0, 20.0)),
        ("between 3.5 and 7 s", (3.5, 7.0)),
        ("It happens at 10-20 seconds.", (10.0, 20.0)),
        ("10 s to 12.5 seconds", (10.0, 12.5)),
        ("from 20 to 10 seconds", None),  # reversed
        ("at 10 seconds", None),
    ],
)
def test_spoken_interval(text, expected):
    assert spoken_interval(text) == expected


TG = json.dumps({"time": [10, 20]})


@pytest.mark.parametrize(
    ("response", "accuracy", "format_score"),
    [
        (tagged('{"time": [10, 20]}'), 1.0, 1.0),
        (tagged('{"time": [15, 25]}'), 1 / 3, 1.0),
        (tagged('```json\n{"time": [10, 20]}\n```'), 1.0, 1.0),  # code fences tolerated
        (tagged('The event spans {"time": [10, 20]} in the clip'), 1.0, 1.0),  # surrounding text
        (tagged('{"time": [20, 10]}'), 0.0, 0.5),  # e < s is invalid (the reference: tIoU 0 too)
        (tagged('{"time": [10]}'), 0.0, 0.5),
        (tagged("from 10 to 20 seconds"), 1.0, 0.5),  # accuracy reads it; format wants JSON
        (tagged('{"time": ["10", "20"]}'), 1.0, 1.0),  # numeric strings are numbers
        ('<think>x</think>{"time": [10, 20]}', 1.0, 0.0),
        (tagged(""), 0.0, 0.0),
    ],
)
def test_temporal_grounding(score, response, accuracy, format_score):
    result = score(response, sample("temporal grounding", TG))
    assert result["accuracy"] == pytest.approx(accuracy)
    assert result["format"] == format_score


@pytest.mark.parametrize(
    ("answer", "accuracy", "format_score"),
    [
        ('{"boxes": [0, 0, 10, 10]}', 1.0, 1.0),
        ('{"boxes": [[5, 5, 15, 15]]}', 25 / 175, 1.0),  # a list holding one box is that box
        ('{"boxes": [10, 10, 0, 0]}', 0.0, 0.5),  # x2 < x1
        ('{"boxes": [0, 0, 10]}', 0.0, 0.5),
        ('{"time": [1, 2]}', 0.0, 0.5),
    ],
)
def test_spatial_grounding(score, answer, accuracy, format_score):
    result = score(tagged(answer), sample("spatial grounding", '{"boxes": [0, 0, 10, 10]}'))
    assert result["accuracy"] == pytest.approx(accuracy)
    assert result["format"] == format_score


ST_TRUTH = json.dumps({"time": [2, 4], "boxes": {"2": [0, 0, 10, 10], "3": [0, 0, 10, 10], "4": [0, 0, 10, 10]}})


@pytest.mark.parametrize(
    ("answer", "accuracy", "format_score"),
    [
        (ST_TRUTH, 1.0, 1.0),
        # Every GT second but one box: mean over the GT's 3 seconds = 1/3 (the reference averaged over
        # the common second only and paid 1.0 for the box term).
        ('{"time": [2, 4], "boxes": {"3": [0, 0, 10, 10]}}', 0.5 + 0.5 / 3, 1.0),
        ('{"time": [2, 4], "boxes": {}}', 0.5, 1.0),  # an empty boxes object is valid
        ('{"time": [2, 4], "boxes": {"2.0": [0, 0, 10, 10], "3": [0, 0, 10, 10], "4": [0, 0, 10, 10]}}', 1.0, 1.0),
        ('{"time": [2, 4]}', 0.5, 0.5),  # no boxes object: format 0.5, tIoU still counts
        ('{"time": [4, 2], "boxes": {}}', 0.0, 0.5),
        ("from 2 to 4 seconds", 0.5, 0.5),
    ],
)
def test_spatial_temporal_grounding(score, answer, accuracy, format_score):
    result = score(tagged(answer), sample("spatial-temporal grounding", ST_TRUTH))
    assert result["accuracy"] == pytest.approx(accuracy)
    assert result["format"] == format_score


def test_spatial_temporal_without_truth_boxes_is_tiou_alone(score):
    # E's rule (tIoU alone), not training's 0.5·tIoU (spec §2.5).
    truth = json.dumps({"time": [2, 4], "boxes": {}})
    result = score(tagged('{"time": [2, 4], "boxes": {}}'), sample("spatio-temporal grounding", truth))
    assert result["accuracy"] == 1.0


@pytest.mark.parametrize(
    ("answer", "accuracy", "format_score"),
    [
        ('{"boxes": {"0": [0, 0, 10, 10], "1": [0, 0, 10, 10]}}', 1.0, 1.0),
        ('{"boxes": {"0": [0, 0, 10, 10]}}', 0.5, 1.0),  # a missing GT second counts 0
        ('{"boxes": {"0": [0, 0, 10, 10], "1": [0, 0, 10, 10], "7": [1, 1, 2, 2]}}', 1.0, 1.0),
        ('{"boxes": {"0": [0, 0, 10], "1": [0, 0, 10, 10]}}', 0.5, 1.0),  # one malformed box
        ('{"boxes": [0, 0, 10, 10]}', 0.0, 0.5),
    ],
)
def test_tracking(score, answer, accuracy, format_score):
    truth = '{"boxes": {"0": [0, 0, 10, 10], "1": [0, 0, 10, 10]}}'
    result = score(tagged(answer), sample("tracking", truth))
    assert result["accuracy"] == pytest.approx(accuracy)
    assert result["format"] == format_score


def test_malformed_ground_truth_scores_zero(score):
    for problem_type in ("temporal grounding", "spatial grounding", "spatial-temporal grounding", "tracking"):
        result = score(tagged('{"time": [1, 2], "boxes": {}}'), sample(problem_type, "not json"))
        assert result["accuracy"] == 0.0
