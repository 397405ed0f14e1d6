"""Code: Python executed against tests in the sandbox (few tests: each run is a subprocess),
the identifier rule without tests, and SVG/HTML tag overlap."""

from __future__ import annotations

import pytest

from .conftest import sample, tagged

ADD = "def add(a, b):\n    return a + b\n"
TESTS = ["assert add(1, 2) == 3", "assert add(-1, 1) == 0", "assert add(2, 2) == 5"]


def test_pass_fraction_of_tests(score):
    # Two of the three asserts hold (the third is deliberately wrong).
    result = score(tagged(f"```python\n{ADD}```"), sample("code", ADD, tests=TESTS))
    assert result["accuracy"] == pytest.approx(2 / 3)
    assert result["format"] == 1.0


def test_hanging_code_times_out(score):
    from evr1.rewards.batch import compute_scores

    result = compute_scores(
        [tagged("def f():\n    while True:\n        pass\n")],
        [sample("code", "def f(): pass", tests=["f()"])],
        timeout=1.0,
    )
    assert result.timed_out == [0]
    assert result.scores[0]["overall"] == 0.0


@pytest.mark.parametrize(
    ("answer", "accuracy", "format_score"),
    [
        ("def add(a, b): return a + b\nimport math", 1.0, 1.0),  # both GT identifiers present
        ("def plus(a, b): return a + b", 0.0, 1.0),
        ("def add(a, b) return", 0.0, 0.5),  # does not compile
    ],
)
def test_without_tests_identifier_rule(score, answer, accuracy, format_score):
    truth = "import math\ndef add(a, b):\n    return a + b"
    result = score(tagged(answer), sample("coding", truth))
    assert (result["accuracy"], result["format"]) == (accuracy, format_score)


def test_without_tests_and_without_identifiers_is_half(score):
    assert score(tagged("x = 1"), sample("python", "print(2)"))["accuracy"] == 0.5


def test_boxed_inside_code_is_not_unwrapped(score):
    code = 'def f():\n    return "\\\\boxed{x}"\n'
    assert score(tagged(code), sample("code", "def f(): pass"))["accuracy"] == 1.0


def test_svg_and_html(score):
    svg = '<svg width="10"><rect x="1"/><circle r="2"/></svg>'
    assert score(tagged(svg), sample("svg-code", svg))["accuracy"] == pytest.approx(1.0)
    partial = '<svg width="10"><rect x="1"/></svg>'
    # Tags {svg, rect} of {svg, rect, circle} → 2/3; lengths without spaces 35 / 49.
    expected = 0.7 * 2 / 3 + 0.3 * len(partial.replace(" ", "")) / len(svg.replace(" ", ""))
    assert score(tagged(partial), sample("svg", svg))["accuracy"] == pytest.approx(expected)
    assert score(tagged("no svg here"), sample("svg", svg))["format"] == 0.5
    html = "<HTML><body><p>hi</p></body></HTML>"
    assert score(tagged(html.lower()), sample("html-code", html))["accuracy"] == pytest.approx(1.0)
    assert score(tagged("plain text"), sample("html", html))["format"] == 0.5
