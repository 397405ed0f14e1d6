"""Boolean (last yes/no/true/false word, or a lone 1/0) and preference labels."""

from __future__ import annotations

import pytest

from evr1.rewards.boolean import parse_boolean
from evr1.rewards.preference import TIE, parse_preference

from .conftest import sample, tagged


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("yes", True),
        ("yes.", True),  # the unified reference gave format 0.5 here
        ("Yes, it is.", True),
        ("No, it is not", False),  # "not" is not a no-word; the last one is "No"
        ("TRUE", True),
        ("false", False),
        ("1", True),
        ("(0)", False),
        ("I thought yes but actually no", False),  # the last word wins
        ("I don't know", None),  # "know" contains "no" but is not the word (E matched substrings)
        ("not sure", None),
        ("10", None),  # a lone 1/0 only
        ("", None),
    ],
)
def test_parse_boolean(text, expected):
    assert parse_boolean(text) is expected


@pytest.mark.parametrize(
    ("response", "truth", "accuracy", "format_score"),
    [
        (tagged("Yes"), "yes", 1.0, 1.0),
        (tagged("yes."), "Yes", 1.0, 1.0),
        (tagged("No, it is not"), "no", 1.0, 1.0),
        (tagged("true"), "Yes", 1.0, 1.0),
        (tagged("1"), "yes", 1.0, 1.0),
        (tagged("maybe"), "yes", 0.0, 0.5),
        (tagged("yes"), "<answer>No</answer>", 0.0, 1.0),
        ("<think>hmm</think> yes", "yes", 1.0, 0.0),
    ],
)
def test_boolean_scores(score, response, truth, accuracy, format_score):
    result = score(response, sample("binary classification", truth))
    assert (result["accuracy"], result["format"]) == (accuracy, format_score)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Response 1", 1),
        ("response 2", 2),
        ("A", 1),
        ("(b)", 2),
        ("Response A is better", 1),
        ("the first one", 1),
        ("The second response is more accurate", 2),
        ("Tie", TIE),
        ("They are equally good", TIE),
        ("both are fine", TIE),
        ("It is a tie", TIE),  # the article "a" is not a vote for response 1
        ("Response 2 is better than Response 1", 2),  # the first label in reading order
        ("no idea", None),
    ],
)
def test_parse_preference(text, expected):
    assert parse_preference(text) == expected


@pytest.mark.parametrize(
    ("answer", "truth", "accuracy"),
    [
        ("Response 1", "response 1", 1.0),
        ("first", "A", 1.0),
        ("Tie", "equal", 1.0),
        ("Response 2", "Response 1", 0.0),
        ("no idea", "Response 1", 0.0),
    ],
)
def test_preference_scores(score, answer, truth, accuracy):
    for problem_type in ("llava", "critic", "preference"):
        assert score(tagged(answer), sample(problem_type, truth))["accuracy"] == accuracy
