"""Open-ended (exact match, else mean ROUGE-1/2/L), OCR (1 − WER), generic, and math."""

from __future__ import annotations

import pytest

from evr1.rewards.open_ended import rouge_mean

from .conftest import sample, tagged


@pytest.mark.parametrize("answer", ["Paris", "paris", "Paris.", "the Paris"])
def test_open_ended_exact_match_after_normalisation(score, answer):
    # The reference scored "Paris" vs "paris" 2/3 (ROUGE-2 of one word is 0); exact match is 1 here.
    assert score(tagged(answer), sample("open-ended", "Paris"))["accuracy"] == 1.0


def test_open_ended_falls_back_to_rouge(score):
    truth, answer = "a man pours milk into a glass", "the man pours milk"
    result = score(tagged(answer), sample("video qa", truth))
    assert result["accuracy"] == pytest.approx(rouge_mean(truth, answer))
    assert 0.0 < result["accuracy"] < 1.0
    assert result["format"] == 1.0


def test_rouge_mean_reference_values():
    # Hand count: reference "a red car is parked" (5 tokens), prediction "the red car parks" (4;
    # "parks"/"parked" stem to "park"). ROUGE-1: 3 common ("red", "car", "park") → P 3/4, R 3/5,
    # F 2/3. ROUGE-2: "red car", "car park" in the prediction vs "red car", "car is", "is park",
    # "a red" in the reference → 1 common → P 1/3, R 1/4, F 2/7. ROUGE-L: LCS "red car park" = 3 → 2/3.
    expected = (2 / 3 + 2 / 7 + 2 / 3) / 3
    assert rouge_mean("a red car is parked", "the red car parks") == pytest.approx(expected)


@pytest.mark.parametrize(
    ("answer", "accuracy"),
    [
        ("OPEN 24 HOURS", 1.0),
        ("open 24 hours", 1.0),  # case is ignored
        ("open 24 hour", 2 / 3),  # 1 substitution in 3 words
        ("open", 1 / 3),  # 2 deletions
        ("we are open 24 hours every day now", 0.0),  # 5 insertions: WER > 1, clipped
    ],
)
def test_ocr(score, answer, accuracy):
    assert score(tagged(answer), sample("ocr", "OPEN 24 HOURS"))["accuracy"] == pytest.approx(accuracy)


@pytest.mark.parametrize(
    ("answer", "truth", "accuracy"),
    [
        ("Kitchen.", "kitchen", 1.0),
        ("the kitchen", "kitchen", 1.0),
        ("?", "?", 1.0),  # both normalise to nothing: trimmed lower-cased strings compared
        ("!", "?", 0.0),
        ("sirap", "Paris", 0.0),  # no symbolic comparison of words (math-verify: a*i*p*r*s twice)
        ("bedroom", "kitchen", 0.0),
    ],
)
def test_generic_text(score, answer, truth, accuracy):
    result = score(tagged(answer), sample("some new task", truth))
    assert result["accuracy"] == accuracy


def test_empty_ground_truth_gives_zero_accuracy(score):
    for problem_type in ("multiple choice", "numerical", "boolean", "open-ended", "ocr", "generic", "llava"):
        result = score(tagged("B"), sample(problem_type, ""))
        assert result["accuracy"] == 0.0, problem_type
        assert result["format"] in (0.5, 1.0)


@pytest.mark.parametrize(
    ("answer", "truth", "accuracy"),
    [
        (r"\frac{1}{2}", "0.5", 1.0),
        ("(x+1)^2", "x^2+2x+1", 1.0),
        (r"\sqrt{2}", "1.41421356", 1.0),
        ("3", "$x=3$", 1.0),
        ("4", "3", 0.0),
        ("sirap", "Paris", 0.0),
        ("(B)", "B", 1.0),  # with options a math item is multiple choice
    ],
)
def test_math(score, answer, truth, accuracy):
    fields = {"options": ["A. 1", "B. 2"]} if truth == "B" else {}
    result = score(tagged(answer), sample("math", truth, **fields))
    assert result["accuracy"] == accuracy
    assert result["format"] == 1.0


def test_generic_uses_math_verify_for_mathematical_answers(score):
    assert score(tagged("1/2"), sample("unknown numeric type", "0.5"))["accuracy"] == 1.0


def test_math_timeout_scores_zero_and_recovers():
    # sympy expands 10^{10^{10}} in one C call that no signal interrupts: the helper process is
    # killed after the limit (+2 s grace), the item scores 0, and the next item works again.
    from evr1.rewards.batch import compute_scores

    result = compute_scores(
        [tagged("10^{10^{10}}"), tagged("4/2")],
        [sample("math", "1"), sample("math", "$2$")],
        timeout=1.0,
    )
    assert result.timed_out == [0]
    assert result.metrics["timeouts"] == 1.0
    assert result.scores[0] == {"overall": 0.0, "accuracy": 0.0, "format": 0.0}
    assert result.scores[1]["accuracy"] == 1.0


def test_math_works_outside_the_main_thread(score):
    # math-verify's own timeouts need the main thread; ours send the work to the helper process.
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(1) as pool:
        result = pool.submit(score, tagged("(x+1)^2"), sample("math", "x^2+2x+1")).result()
    assert result["accuracy"] == 1.0
