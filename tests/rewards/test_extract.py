"""Answer extraction: the last complete tag, tag tolerance, boxed, final statements, fallbacks."""

from __future__ import annotations

import pytest

from evr1.rewards import extract


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("<answer>B</answer>", "B"),
        ("<answer> B </answer>", "B"),
        ("< answer >B< / answer >", "B"),  # tag syntax tolerated (spec §2.2 step 2)
        ("<ANSWER>B</Answer>", "B"),
        ("<answer>A</answer> then <answer>C</answer>", "C"),  # last tag wins (V), not first (U/E)
        ("<answer>A<answer>B</answer>", "B"),  # no tag inside a complete pair
        ("<answer>A</answer><answer>B", "A"),  # the trailing tag is incomplete
        ("<answer></answer>", ""),
        ("no tag here", None),
        ("<answer>B", None),
        ("<answer>x > 3 and a / b</answer>", "x > 3 and a / b"),  # content never rewritten (§7.1 #8)
        ("<answer>line one\nline two</answer>", "line one\nline two"),
    ],
)
def test_answer_tag(text, expected):
    assert extract.answer_tag(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (r"so \boxed{42}", "42"),
        (r"\boxed{1} then \boxed{\frac{1}{2}}", r"\frac{1}{2}"),
        (r"\boxed{unbalanced", None),
        ("nothing", None),
    ],
)
def test_last_boxed(text, expected):
    assert extract.last_boxed(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Thinking...\nThe answer is B.", "B"),
        ("The final answer is 12.5 g.\nExtra text", "12.5 g"),
        ("Final answer: (C)", "(C)"),
        ("answer: first\nso the answer is second.", "second"),  # the last statement
        ("The answer is:\n  B", "B"),  # statement ending its line: the next line
        ("The answer is ...", "..."),  # an ellipsis is not a trailing period
        ("I have no final word", None),
    ],
)
def test_final_statement(text, expected):
    assert extract.final_statement(text) == expected


@pytest.mark.parametrize(
    ("response", "expected"),
    [
        ("<think>x</think>\nThe answer is \\boxed{7}.", "7"),  # final statement first, boxed unwrapped
        ("<think>x</think> result \\boxed{8} done", "8"),  # then the last boxed
        ("<think>the answer is wrong</think> 9", "wrong"),  # a final statement anywhere still wins
        ("<think>x</think>  B  ", "B"),  # then the text after </think>
        ("just B", "just B"),  # then the whole response
        ("<think>x</think><answer>B", "B"),  # stray tags of a truncated response are dropped
    ],
)
def test_fallback_answer_order(response, expected):
    assert extract.fallback_answer(response) == expected


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        ("<answer>B</answer>", "B"),
        ("  B ", "B"),
        (None, ""),
        (5, "5"),
        (True, "yes"),
        ({"time": [1, 2]}, '{"time": [1, 2]}'),
    ],
)
def test_unwrap_ground_truth(answer, expected):
    assert extract.unwrap_ground_truth(answer) == expected


def test_normalize_text_drops_case_punctuation_and_articles():
    assert extract.normalize_text("The  Red, car!") == "red car"
    assert extract.normalize_text("?!") == ""


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{"time": [1, 2]}', {"time": [1, 2]}),
        ('```json\n{"time": [1, 2]}\n```', {"time": [1, 2]}),
        ('I think {"a": 1} but then {"time": [3, 4]} is it', {"time": [3, 4]}),
        ('{"s": "}{"} and more', {"s": "}{"}),  # braces inside strings are not structure
        ("{not json}", None),
        ("[1, 2]", None),
    ],
)
def test_load_json_object(text, expected):
    assert extract.load_json_object(text) == expected
