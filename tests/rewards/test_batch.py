"""Batch scoring: inline and pooled results agree; timeouts (Python- and C-level) score 0 and are
counted; metrics. The pool tests spawn real worker processes (a few seconds each)."""

from __future__ import annotations

import json

import pytest

from evr1.rewards import compute_score, compute_scores, shutdown_pools

from .conftest import sample, tagged

MIXED = [
    (tagged("B"), sample("multiple choice", "B")),
    (tagged("It is a dog"), sample("multiple choice", "A")),
    (tagged("12.974"), sample("numerical", "12.97")),
    (tagged("14.2"), sample("regression", "10")),
    (tagged("No, it is not"), sample("boolean", "no")),
    (tagged('{"time": [15, 25]}'), sample("temporal grounding", json.dumps({"time": [10, 20]}))),
    (tagged("the man pours milk"), sample("open-ended", "a man pours milk into a glass")),
    (tagged("open 24 hour"), sample("ocr", "OPEN 24 HOURS")),
    (tagged("Response 2"), sample("llava", "Response 2")),
    (tagged(r"\frac{1}{2}"), sample("math", "0.5")),
    ("no tag at all: B", sample("multiple choice", "B")),
    (tagged("kitchen"), sample("brand new type", "Kitchen")),
] * 3


@pytest.fixture(scope="module", autouse=True)
def _stop_pools():
    yield
    shutdown_pools()


def test_inline_batch_matches_compute_score():
    responses, samples = zip(*MIXED, strict=True)
    result = compute_scores(responses, samples, workers=1)
    assert result.scores == [compute_score(r, s) for r, s in MIXED]
    assert result.metrics["items"] == len(MIXED)
    assert result.metrics["timeouts"] == 0.0
    assert result.metrics["errors"] == 0.0
    assert result.metrics["unknown"] == 3.0
    assert result.metrics["unknown_type/brand new type"] == 3.0
    assert result.metrics["family/multiple choice"] == 9.0


def test_pool_matches_inline():
    responses, samples = zip(*MIXED, strict=True)
    pooled = compute_scores(responses, samples, workers=2, chunk_size=4)
    assert pooled.scores == compute_scores(responses, samples, workers=1).scores
    assert pooled.metrics["unknown"] == 3.0


def test_mismatched_lengths_raise():
    with pytest.raises(ValueError, match="2 responses but 1 samples"):
        compute_scores(["a", "b"], [sample("mc", "A")])


PLUGIN = """
import hashlib, os, time
from evr1.rewards import FamilyResult, register

@register("slow-test-family")
def slow(text, sample):
    if text == "c loop":
        # Minutes inside one C call: no Python signal handler runs until it returns.
        hashlib.pbkdf2_hmac("sha256", b"x", b"y", 10**9)
    if text == "sleep":
        time.sleep(60)  # Python-level: the worker's alarm interrupts it
    if text == "crash":
        os._exit(3)  # the worker dies, as on a segfault or the OOM killer
    return FamilyResult(float(text == sample["answer"]), True)
"""


@pytest.fixture
def slow_family(plugin):
    plugin(PLUGIN, "slow")


def test_pool_timeouts_score_zero_and_the_rest_is_scored(slow_family):
    responses = [tagged("c loop"), tagged("sleep")] + [tagged("ok")] * 6
    samples = [sample("slow-test-family", "ok")] * len(responses)
    result = compute_scores(responses, samples, workers=2, timeout=1.0, chunk_size=2)
    assert sorted(result.timed_out) == [0, 1]
    assert result.metrics["timeouts"] == 2.0
    assert [s["accuracy"] for s in result.scores] == [0.0, 0.0] + [1.0] * 6
    assert result.scores[0] == {"overall": 0.0, "accuracy": 0.0, "format": 0.0}


def test_pool_survives_a_dying_worker(slow_family):
    # The crashing item runs again alone in a one-worker pool, which names it: an error, scored 0.
    # Items that were in progress beside it are retried, not failed.
    responses = [tagged("ok"), tagged("crash")] + [tagged("ok")] * 6
    samples = [sample("slow-test-family", "ok")] * len(responses)
    result = compute_scores(responses, samples, workers=2, timeout=5.0, chunk_size=1)
    assert result.errors == {1: "worker died"}
    assert result.metrics["errors"] == 1.0
    assert [s["accuracy"] for s in result.scores] == [1.0, 0.0] + [1.0] * 6
