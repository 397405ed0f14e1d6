"""Numerical and regression: number parsing, precision-aware equality, MRA.

Expected values follow the issue's semantics; where the reference differs (spec §2.2, §7.1 #4)
the comment says so.
"""

from __future__ import annotations

import pytest

from evr1.rewards.numerical import mean_relative_accuracy, parse_number

from .conftest import sample, tagged


@pytest.mark.parametrize(
    ("text", "value", "kind"),
    [
        ("42", 42.0, "integer"),
        ("-3.5", -3.5, "decimal"),
        ("−2", -2.0, "integer"),  # Unicode minus
        ("1,234,567.25", 1234567.25, "decimal"),
        ("50%", 0.5, "percent"),
        (r"12.5\%", 0.125, "percent"),
        ("1/2", 0.5, "fraction"),
        (r"\frac{3}{4}", 0.75, "fraction"),
        ("12.97 g", 12.97, "decimal"),
        ("about 7 people", 7.0, "integer"),
        ("twenty five", 25.0, "words"),
        ("one hundred", 100.0, "words"),  # the reference summed words: 101
        ("three thousand two hundred and five", 3205.0, "words"),
        ("1.5e3", 1500.0, "scientific"),
        (".5", 0.5, "decimal"),
    ],
)
def test_parse_number(text, value, kind):
    number = parse_number(text)
    assert number is not None
    assert number.value == pytest.approx(value)
    assert number.kind == kind


@pytest.mark.parametrize("text", ["", "no number here", "1/0", "nan", "1e999"])
def test_parse_number_rejects(text):
    assert parse_number(text) is None


@pytest.mark.parametrize(
    ("answer", "truth", "accuracy"),
    [
        ("12.974", "12.97", 1.0),  # within half a unit of the GT's last decimal
        ("12.965", "12.97", 1.0),  # the boundary itself counts (|Δ| = 0.005)
        ("12.96", "12.97", 0.0),
        ("3.16", "3.14", 0.0),  # the reference's absolute 0.015 accepted this
        ("5.0", "5", 1.0),  # an integer GT needs equality, and 5.0 is 5
        ("5.4", "5", 0.0),
        ("1,000", "1000", 1.0),  # thousands separators (E scored this 0)
        ("50%", "0.5", 1.0),
        ("0.5", "50%", 1.0),  # a percentage GT: relative 1e-6
        ("50", "50%", 1.0),  # the sign dropped, not the value
        ("0.3333333", "1/3", 1.0),  # a fraction GT: relative 1e-6
        ("0.333", "1/3", 0.0),
        ("twenty five", "25", 1.0),
        ("one hundred", "100", 1.0),
        ("12.97 g", "12.97", 1.0),
        ("12.97", "<answer>12.97 g</answer>", 1.0),
        ("0.001", "0.0012", 0.0),  # precision at small magnitudes (absolute 0.015 said yes)
    ],
)
def test_numerical_accuracy(score, answer, truth, accuracy):
    result = score(tagged(answer), sample("numerical", truth))
    assert result["accuracy"] == accuracy
    assert result["format"] == 1.0


@pytest.mark.parametrize(
    ("response", "format_score", "accuracy"),
    [
        (tagged("I am not sure"), 0.5, 0.0),
        (tagged(""), 0.0, 0.0),
        ("The answer is 7.", 0.0, 1.0),
        ("<think>2 + 5</think> 7", 0.0, 1.0),  # the first number after </think>
    ],
)
def test_numerical_format_and_fallback(score, response, format_score, accuracy):
    result = score(response, sample("numerical", "7"))
    assert (result["format"], result["accuracy"]) == (format_score, accuracy)


@pytest.mark.parametrize(
    ("predicted", "truth", "expected"),
    [
        # Thresholds t = 0.50, 0.55 … 0.95; a threshold counts when |p − g|/|g| < 1 − t (VSI-Bench).
        # Values keep clear of the boundaries, where the 1e-8 in the denominator decides.
        (10.0, 10.0, 1.0),
        (11.2, 10.0, 0.8),  # rel 0.12: t = 0.50 … 0.85 count (8 of 10)
        (14.2, 10.0, 0.2),  # rel 0.42: t = 0.50, 0.55
        (16.0, 10.0, 0.0),  # rel 0.6: none
        (4.0, 10.0, 0.0),
        (0.0, 0.0, 1.0),
    ],
)
def test_mean_relative_accuracy(predicted, truth, expected):
    assert mean_relative_accuracy(predicted, truth) == pytest.approx(expected)


def test_regression_uses_mra(score):
    # The unified reference (U) scored regression by exact 2-dp match; ours is MRA like V and E.
    result = score(tagged("14.2"), sample("regression", "10"))
    assert result["accuracy"] == pytest.approx(0.2)
    assert score(tagged("10.0"), sample("regression", "10"))["accuracy"] == 1.0


def test_non_string_ground_truth_is_tolerated(score):
    # Ingestion rejects it; the scorer must still not zero it silently or raise.
    assert score(tagged("3"), sample("numerical", 3))["accuracy"] == 1.0
