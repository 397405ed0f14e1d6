"""Multiple choice: strict letter parsing, options, and the gaming traps of spec §7.1 #3.

The reference test vectors of spec §2.6 are withheld from us; the rows below come from the
traps the spec describes as executed (row 9 "A B C D" → A, row 10 "I will …" → I, row 11
"It is a dog" → A, E4 "the answer is a red car" → A). Our semantics differ on purpose: none of
them yields a letter here.
"""

from __future__ import annotations

import pytest

from evr1.rewards.multiple_choice import label_options, options_of, parse_letter

from .conftest import sample, tagged

OPTIONS = ["A. Red", "B. Blue", "C. Green", "D. Yellow"]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("B", "B"),
        ("b", "B"),  # either case
        ("(C)", "C"),
        ("[D]", "D"),
        ("B.", "B"),
        ("B)", "B"),
        ("B:", "B"),
        ("**B**", "B"),
        ("B. Blue", "B"),
        ("(b) blue", "B"),
        ("The answer is B.", "B"),
        ("The correct answer is (c)", "C"),
        ("Answer: d", "D"),
        ("I will go with C", "C"),  # not the pronoun I (reference row 10 read I)
        ("I choose option b", "B"),
        ("After comparing, C is correct.", "C"),
        ("Option D is the best.", "D"),
        ("Looking at each option...\nthe car is blue\nB", "B"),  # last line
        ("It is a dog", None),  # not the article (reference row 11 read A)
        ("A B C D", None),  # no single answer (reference row 9 read A)
        ("the answer is a red car", None),  # E4 read A
        ("A dog chases the ball", None),
        ("I think so", None),
        ("e.g. the red one", None),  # not "E."
        ("THIS IS CORRECT", None),  # a letter is never read out of a word
        ("options are hard", None),
        ("", None),
    ],
)
def test_parse_letter_without_options(text, expected):
    assert parse_letter(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Blue", "B"),  # option text alone is that option
        ("blue.", "B"),
        ("The Green", "C"),  # articles and case are normalised away
        ("E", None),  # not an option letter
        ("The answer is E, no wait, the answer is A", "A"),  # the last valid phrase
        ("Purple", None),
    ],
)
def test_parse_letter_with_options(text, expected):
    assert parse_letter(text, options_of({"options": OPTIONS})) == expected


def test_single_letter_option_text():
    options = options_of({"options": ["A. x", "B. y"]})
    assert parse_letter("y", options) == "B"  # not a valid letter, but option B's text
    assert parse_letter("b", options) == "B"


def test_options_beyond_j_are_usable():
    options = [f"{chr(65 + i)}. choice {i}" for i in range(14)]  # VideoMMMU has 14-option items
    assert parse_letter("N", options_of({"options": options})) == "N"


def test_unlabelled_options_get_letters_by_position():
    assert label_options(["Red", "Blue"]) == ["A. Red", "B. Blue"]
    assert label_options(OPTIONS) == OPTIONS
    assert parse_letter("Blue", options_of({"options": ["Red", "Blue"]})) == "B"


@pytest.mark.parametrize(
    ("response", "fields", "accuracy", "format_score"),
    [
        (tagged("B"), {}, 1.0, 1.0),
        (tagged("(b)"), {}, 1.0, 1.0),
        (tagged("Blue"), {"options": OPTIONS}, 1.0, 1.0),  # option text parses (format 1)
        (tagged("A"), {}, 0.0, 1.0),
        (tagged("It is a dog"), {}, 0.0, 0.5),
        (tagged("A B C D"), {}, 0.0, 0.5),
        (tagged(""), {}, 0.0, 0.0),  # empty tag: format 0, no fallback letter
        ("I will go with B", {}, 1.0, 0.0),  # no tag: fallback to the whole response
        ("<think>hmm</think>\nThe answer is (B).", {}, 1.0, 0.0),
        (tagged(r"\boxed{B}"), {}, 1.0, 1.0),
        (tagged("E"), {"options": OPTIONS}, 0.0, 0.5),
    ],
)
def test_multiple_choice_scores(score, response, fields, accuracy, format_score):
    result = score(response, sample("multiple choice", "<answer>B</answer>", **fields))
    assert (result["accuracy"], result["format"]) == (accuracy, format_score)
    assert result["overall"] == pytest.approx(0.9 * accuracy + 0.1 * format_score)


def test_ground_truth_as_option_text(score):
    result = score(tagged("B"), sample("multiple choice", "Blue", options=OPTIONS))
    assert result["accuracy"] == 1.0


def test_ground_truth_that_is_not_a_letter_compares_text(score):
    # Four options, GT "K" (a data error): no letter matches it, normalised text equality does.
    assert score(tagged("K"), sample("multiple choice", "K", options=OPTIONS))["accuracy"] == 1.0
    assert score(tagged("A"), sample("multiple choice", "K", options=OPTIONS))["accuracy"] == 0.0


@pytest.mark.parametrize("alias", ["multiple choice", "Multiple_Choice", " MC ", "multiple-choice", "mcq"])
def test_aliases_route_here(score, alias):
    assert score(tagged("It is a dog"), sample(alias, "A"))["format"] == 0.5
