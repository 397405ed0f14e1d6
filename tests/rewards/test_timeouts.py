"""The per-item time limit outside pools: the helper process and the alarm."""

from __future__ import annotations

import hashlib
import time

import pytest

from evr1.rewards.timeouts import ItemTimeout, item_timeout, run_limited, time_limit


def test_helper_is_killed_when_stuck_in_c_code():
    # pbkdf2 with 10^9 rounds runs for minutes in one C call that no signal interrupts: only
    # killing the helper stops it (after the limit plus a 2 s grace).
    started = time.monotonic()
    with item_timeout(1.0), pytest.raises(ItemTimeout):
        run_limited(hashlib.pbkdf2_hmac, "sha256", b"x", b"y", 10**9)
    assert time.monotonic() - started < 15
    with item_timeout(5.0):  # a fresh helper serves the next call
        expected = hashlib.pbkdf2_hmac("sha256", b"x", b"y", 1)
        assert run_limited(hashlib.pbkdf2_hmac, "sha256", b"x", b"y", 1) == expected


def test_alarm_interrupts_python_code_and_restores_outer_timer():
    with pytest.raises(ItemTimeout), time_limit(0.2):
        while True:
            pass
    with time_limit(5.0):
        with time_limit(0.1):
            pass
        time.sleep(0.2)  # the outer timer (5 s) is back, not fired early


def test_no_limit_runs_directly():
    with item_timeout(None):
        assert run_limited(sum, [1, 2, 3]) == 6


# ---- issue 36: one meaning of `timeout` in every family, validated -------------------------------

BAD_TIMEOUTS = [-1, -0.5, 0, float("nan"), float("inf"), float("-inf"), True, "10"]


@pytest.mark.parametrize("timeout", BAD_TIMEOUTS)
def test_invalid_timeouts_raise_a_clear_value_error(timeout):
    from evr1.rewards import compute_score, compute_scores

    math_sample = {"problem_type": "math", "answer": "0.5"}
    code_sample = {"problem_type": "code", "answer": "def f(): pass", "tests": ["assert f() is None"]}
    for sample in (math_sample, code_sample):
        with pytest.raises(ValueError, match="timeout must be"):
            compute_score("<answer>1/2</answer>", sample, timeout=timeout)
        with pytest.raises(ValueError, match="timeout must be"):
            compute_scores(["<answer>1/2</answer>"], [sample], timeout=timeout)
    with pytest.raises(ValueError, match="timeout must be"), item_timeout(timeout):
        pass


def test_none_means_no_limit_for_math_and_code():
    from evr1.rewards import compute_score

    assert compute_score("<answer>\\frac{1}{2}</answer>", {"problem_type": "math", "answer": "0.5"},
                         timeout=None)["accuracy"] == 1.0
    code = "<answer>def f():\n    return 1\n</answer>"
    assert compute_score(code, {"problem_type": "code", "answer": "def f(): pass", "tests": ["assert f() == 1"]},
                         timeout=None)["accuracy"] == 1.0
