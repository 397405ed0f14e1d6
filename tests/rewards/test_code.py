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


# ---- issue 36: test forms, entry points, stdin/stdout, unjudgeable tests, no silent 0 -------------

PRIME = "def is_prime(n):\n    return n > 1 and all(n % d for d in range(2, int(n ** 0.5) + 1))\n"


@pytest.mark.parametrize(
    ("tests", "extra", "form", "judgeable"),
    [
        (None, {}, "none", True),
        (["assert add(1, 2) == 3", "assert add(0, 0) == 0"], {}, "literal asserts", True),
        (["assert is_prime(7)", "assert not is_prime(8)"], {}, "bare asserts", True),
        (["assert add(1, 2) == add(2, 1)"], {}, "comparisons", True),
        (["assert add(1, 2) == 3", "assert is_prime(7)"], {}, "mixed", True),
        ("def check(candidate):\n    assert candidate(1, 2) == 3\n", {"entry_point": "add"}, "program", True),
        ("def check(candidate):\n    assert candidate(1, 2) == 3\ncheck(add)\n", {}, "program", True),
        ("def check(candidate):\n    assert candidate(1, 2) == 3\n", {}, "program", False),
        ([{"input": "1\n", "output": "2\n"}], {}, "stdio", True),
        ({"inputs": ["1"], "outputs": ["2"]}, {}, "stdio", True),
        (["assert 1 == 1"], {}, "invalid", False),  # never uses the answer: any answer passes
        (["assert add(1, 2) =="], {}, "invalid", False),
        ([{"input": 1}], {}, "invalid", False),
        (["assert max([1, 2]) == 2"], {"entry_point": "max"}, "invalid", False),
    ],
)
def test_classify_tests(tests, extra, form, judgeable):
    from evr1.rewards import classify_tests

    result = classify_tests({"problem_type": "code", "answer": "", "tests": tests, **extra})
    assert (result.form, result.judgeable) == (form, judgeable)
    assert judgeable or result.reason


def test_humaneval_program_gets_the_entry_point(score):
    program = "def check(candidate):\n    assert candidate(7)\n    assert not candidate(8)\n"
    right = score(tagged(PRIME), sample("code", PRIME, tests=program, entry_point="is_prime"))
    wrong = score(tagged("def is_prime(n):\n    return True\n"), sample("code", PRIME, tests=program,
                                                                       entry_point="is_prime"))
    assert (right["accuracy"], wrong["accuracy"]) == (1.0, 0.0)


def test_stdin_stdout_problem(score):
    cases = [{"input": "7\n", "output": "yes\n"}, {"input": "8\n", "output": "no"}]
    program = "n = int(input())\nprint('yes' if n in (2, 3, 5, 7) else 'no')\n"
    assert score(tagged(program), sample("code", program, tests=cases))["accuracy"] == 1.0
    assert score(tagged("print('yes')"), sample("code", program, tests=cases))["accuracy"] == 0.5


def test_unjudgeable_tests_are_an_error_unless_allowed(score):
    from evr1.rewards import RewardWarning, compute_scores, sandbox

    item = (tagged("def f():\n    return 1\n"), sample("code", "def f(): pass", tests=["assert 1 == 1"]))
    result = compute_scores([item[0]], [item[1]])
    assert result.scores[0]["accuracy"] == 0.0 and "never use a name the answer defines" in result.errors[0]
    with pytest.warns(RewardWarning, match="UnjudgeableTests"):
        assert score(*item)["accuracy"] == 0.0
    sandbox.allow_unjudgeable_tests(True)
    try:
        assert score(*item)["accuracy"] == 1.0
    finally:
        sandbox.allow_unjudgeable_tests(False)


def test_a_timed_out_item_warns(score):
    from evr1.rewards import RewardWarning

    with pytest.warns(RewardWarning, match="time limit"):
        result = score(tagged("import time\ntime.sleep(30)\n"), sample("code", "x", tests=["assert f() == 1"]))
    assert result["overall"] == 0.0


def test_missing_sandbox_raises_from_every_entry_point(monkeypatch, tmp_path):
    from evr1.rewards import (
        SandboxUnavailable,
        compute_score,
        compute_scores,
        sandbox,
        shutdown_pools,
    )

    monkeypatch.setenv("PATH", str(tmp_path))  # no bwrap (workers inherit the environment)
    monkeypatch.delenv(sandbox.ALLOW_ENV, raising=False)
    sandbox.missing_mechanism.cache_clear()
    item = (tagged(ADD), sample("code", ADD, tests=TESTS))
    try:
        with pytest.raises(SandboxUnavailable, match="bwrap"):
            compute_score(*item)
        with pytest.raises(SandboxUnavailable, match="bwrap"):
            compute_scores([item[0]], [item[1]])
        with pytest.raises(SandboxUnavailable, match="bwrap"):
            compute_scores([item[0]] * 3, [item[1]] * 3, workers=2)
    finally:
        shutdown_pools()
        monkeypatch.undo()
        sandbox.missing_mechanism.cache_clear()
