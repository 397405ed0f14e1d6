"""A family's one-time set-up (a slow import) runs outside the item time limit.

On a loaded machine, importing rouge-score (nltk) or math-verify (sympy) in a fresh pool worker took
longer than the 10 s limit: the first open-ended items of each worker scored 0 as timed out, the
stuck worker was replaced by a fresh one, and the next item timed out the same way. Here a set-up
that takes longer than the limit plus the grace stands in for that import: with the family's
`prepare` the items are scored, and the same work done inside the family's call still times out
(the limit itself is unchanged).
"""

from __future__ import annotations

import time

import pytest

from evr1.rewards import compute_scores, shutdown_pools
from evr1.rewards.registry import Family, FamilyResult, needs_prepare, prepare_family
from evr1.rewards.timeouts import ItemTimeout, item_timeout, run_limited

from .conftest import sample, tagged

SETUP_S = 4.0  # longer than the limit used here (1 s) plus the 2 s grace
LIMIT_S = 1.0

PLUGIN = f"""
import time
from functools import lru_cache
from evr1.rewards import FamilyResult, register

@lru_cache(maxsize=1)
def setup():
    time.sleep({SETUP_S})  # a slow import
    return "scorer"

@register("prepared-test-family", prepare=setup)
def prepared(text, sample):
    setup()
    return FamilyResult(float(text == sample["answer"]), True)

@register("unprepared-test-family")
def unprepared(text, sample):
    setup()  # the same set-up, inside the item's limit
    return FamilyResult(float(text == sample["answer"]), True)
"""


@pytest.fixture
def families(plugin):
    plugin(PLUGIN, "prepared")


def _score(family: str) -> list[float]:
    shutdown_pools()  # fresh workers: the set-up has not run in them
    responses = [tagged("ok")] * 4
    result = compute_scores(responses, [sample(family, "ok")] * 4, workers=2, timeout=LIMIT_S, chunk_size=1)
    return [s["accuracy"] for s in result.scores], result.metrics["timeouts"]


def test_a_pool_workers_set_up_is_not_charged_to_its_first_item(families):
    accuracy, timeouts = _score("prepared-test-family")
    assert (accuracy, timeouts) == ([1.0] * 4, 0.0)


def test_the_same_work_inside_the_family_call_still_times_out(families):
    accuracy, timeouts = _score("unprepared-test-family")
    assert timeouts >= 1 and 0.0 in accuracy  # each fresh worker's first item: over the limit


# ---- the helper process (`run_limited` outside a pool) --------------------------------------------

_setup_done = False


def slow_setup() -> None:
    """Module level, so the helper process can import it; slow once per process."""
    global _setup_done
    if not _setup_done:
        time.sleep(SETUP_S)
        _setup_done = True


def after_setup(x: int) -> int:
    slow_setup()
    return x + 1


_inline_done = False


def setup_inside(x: int) -> int:
    global _inline_done
    if not _inline_done:
        time.sleep(SETUP_S)
        _inline_done = True
    return x + 1


def test_run_limited_prepares_the_helper_outside_the_limit():
    with item_timeout(LIMIT_S):
        assert run_limited(after_setup, 1, prepare=slow_setup) == 2
    with item_timeout(LIMIT_S), pytest.raises(ItemTimeout):  # the control: set-up inside the call
        run_limited(setup_inside, 1)


def test_a_failing_set_up_is_left_to_the_family_call_to_report():
    def broken():
        raise ImportError("no module named 'rouge_score'")

    family = Family("broken-setup", lambda text, s: FamilyResult(1.0, True), (), prepare=broken)
    prepare_family(family)  # does not raise: the family's own call reports it, inside the item
    assert needs_prepare(family)  # not marked as done: the next item tries again
