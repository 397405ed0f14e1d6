"""The async runner: every item ends with exactly one result; failures and hangs are recorded, not fatal;
a rerun resumes by item id whatever order items finished in, and retries the items that failed.

The engine here is a small scripted class implementing the engine protocol (`agenerate`), so the
runner's queueing, timeouts and resume are tested in isolation; the real HF engine runs in the e2e test.
"""

import asyncio
import json
import random
import threading
import time
from types import SimpleNamespace

import pytest

from evr1.engines import EngineBase, Generation, SamplingParams
from evr1.eval import ResultStore, run_items


class EchoEngine:
    """Answers each prompt with its own text after a random delay; can fail on chosen prompts."""

    def __init__(self, fail_on=(), delay=0.01):
        self.fail_on, self.delay, self.calls = set(fail_on), delay, 0

    async def agenerate(self, prompts, params):
        self.calls += 1
        await asyncio.sleep(random.random() * self.delay)
        if any(p in self.fail_on for p in prompts):
            raise RuntimeError("engine exploded")
        return [[SimpleNamespace(text=p)] for p in prompts]


def score(text, item):
    return {"score": 1.0 if text == item["answer"] else 0.0}


def run(items, store, engine, load=lambda item: item["answer"], **kw):
    kw.setdefault("concurrency", 3)
    kw.setdefault("batch_size", 2)
    return asyncio.run(run_items(items, load=load, engine=engine, score=score, store=store,
                                 sampling=SamplingParams(n=1, max_new_tokens=4), **kw))


ITEMS = [{"id": f"q{i}", "answer": f"a{i}", "problem_type": "mc" if i % 2 else "num"} for i in range(20)]


def test_all_items_scored_once_under_concurrency(tmp_path):
    store = ResultStore(tmp_path / "r.jsonl")
    summary = run(ITEMS, store, EchoEngine(), group_key=lambda i: i["problem_type"])
    lines = [json.loads(line) for line in (tmp_path / "r.jsonl").read_text().splitlines()]
    assert sorted(r["id"] for r in lines) == sorted(i["id"] for i in ITEMS)  # exactly one result per item
    assert summary.score == 1.0 and summary.scored == 20 and summary.failed == 0
    assert set(summary.by_group) == {"mc", "num"}


def test_load_error_engine_error_and_hang_are_recorded(tmp_path):
    release = threading.Event()

    def load(item):
        if item["id"] == "q3":
            raise FileNotFoundError("video missing: q3.mp4")
        if item["id"] == "q5":
            release.wait(120)  # a decoder that hangs until the test releases it
        return item["answer"]

    store = ResultStore(tmp_path / "r.jsonl")
    summary = run(ITEMS, store, EchoEngine(fail_on={"a7"}), load=load, timeout_s=0.5, batch_size=1)
    # The run finished while the hung load was still blocked: it never waited for it.
    assert not release.is_set()
    release.set()
    errors = {rid: r["error"] for rid, r in store.results.items() if "error" in r}
    assert set(errors) == {"q3", "q5", "q7"}
    assert "video missing" in errors["q3"] and "timed out" in errors["q5"] and "engine exploded" in errors["q7"]
    # Failures count as wrong: 17 of 20 right, coverage says 17 scored.
    assert summary.failed == 3 and summary.scored == 17 and summary.score == pytest.approx(17 / 20)


def test_resume_skips_done_items_and_ignores_a_torn_line(tmp_path):
    path = tmp_path / "r.jsonl"
    store = ResultStore(path)
    # Simulate a killed run: a random subset finished (in completion order), then a half-written line.
    done = random.Random(0).sample(ITEMS, 7)
    for item in done:
        store.append({"id": item["id"], "group": "all", "score": 1.0, "output": item["answer"]})
    torn = next(i["id"] for i in ITEMS if i not in done)
    with path.open("a") as f:
        f.write('{"id": "%s", "sco' % torn)
    engine = EchoEngine()
    resumed = ResultStore(path)
    assert len(resumed) == 7 and not resumed.done(torn)
    summary = run(ITEMS, resumed, engine)
    assert summary.scored == 20 and summary.score == 1.0
    ids = [json.loads(line)["id"] for line in path.read_text().splitlines()]
    assert sorted(ids) == sorted(i["id"] for i in ITEMS)  # no duplicates, nothing skipped
    # A third run has nothing left to do.
    engine2 = EchoEngine()
    run(ITEMS, ResultStore(path), engine2)
    assert engine2.calls == 0


def test_a_failed_item_is_retried_by_a_rerun_and_the_file_keeps_both_records(tmp_path):
    path = tmp_path / "r.jsonl"
    first = run(ITEMS, ResultStore(path), EchoEngine(fail_on={"a4"}), batch_size=1)
    assert first.failed == 1 and first.scored == 19
    # The rerun's store reads the file back: q4's only record is an error, so it is not done.
    store = ResultStore(path)
    assert not store.done("q4") and store.done("q5")
    engine = EchoEngine()
    second = run(ITEMS, store, engine, batch_size=1)
    assert engine.calls == 1  # only q4 ran again
    assert second.failed == 0 and second.scored == 20 and second.score == 1.0
    assert "error" not in store.results["q4"] and store.results["q4"]["score"] == 1.0
    # Append-only: the failure is still in the file, before the success; a fresh read agrees.
    q4 = [json.loads(line) for line in path.read_text().splitlines() if json.loads(line)["id"] == "q4"]
    assert ["error" in r for r in q4] == [True, False]
    assert len(path.read_text().splitlines()) == 21
    again = ResultStore(path)
    assert again.done("q4") and again.results["q4"]["score"] == 1.0


class SlowThreadEngine(EngineBase):
    """A blocking engine (like HF or vLLM) run through `EngineBase.agenerate`'s worker thread.

    The first call takes `first_delay` s, later ones are quick; every call records how many calls
    were inside `generate` at once, which for the real engines must never exceed 1.
    """

    def __init__(self, first_delay: float):
        self.first_delay, self.calls, self.active, self.max_active = first_delay, 0, 0, 0
        self.lock = threading.Lock()

    def generate(self, prompts, params):
        with self.lock:
            self.calls += 1
            self.active += 1
            self.max_active = max(self.max_active, self.active)
            delay = self.first_delay if self.calls == 1 else 0.0
        try:
            time.sleep(delay)
            return [[Generation(token_ids=[], text=p, finish_reason="stop")] for p in prompts]
        finally:
            with self.lock:
                self.active -= 1


def test_a_timed_out_generation_fails_its_batch_and_never_overlaps_the_next(tmp_path):
    engine = SlowThreadEngine(first_delay=1.5)
    store = ResultStore(tmp_path / "r.jsonl")
    t0 = time.perf_counter()
    summary = run(ITEMS[:6], store, engine, batch_size=1, timeout_s=0.5)
    elapsed = time.perf_counter() - t0
    assert engine.max_active == 1
    # The run waited for the slow first call to return before the next generation started.
    assert elapsed >= 1.5
    assert engine.calls == 6  # one per item; the late output of the first call was discarded
    errors = {rid: r["error"] for rid, r in store.results.items() if "error" in r}
    assert list(errors.values()) == ["generation timed out after 0.5 s"]
    assert all(store.results[rid]["stage"] == "generate" for rid in errors)
    assert summary.failed == 1 and summary.scored == 5 and summary.score == pytest.approx(5 / 6)


def test_an_engine_error_in_a_batch_fails_only_the_item_that_fails_alone(tmp_path):
    store = ResultStore(tmp_path / "r.jsonl")
    engine = EchoEngine(fail_on={"a7"}, delay=0.2)  # slow calls: the next batches fill up meanwhile
    seen = []
    agenerate = engine.agenerate

    async def recording(prompts, params):
        seen.append(list(prompts))
        return await agenerate(prompts, params)

    engine.agenerate = recording
    summary = run(ITEMS, store, engine, batch_size=4, concurrency=4)
    assert any("a7" in call and len(call) > 1 for call in seen), seen  # the failing item was batched
    assert summary.failed == 1 and summary.scored == 19
    assert "engine exploded" in store.results["q7"]["error"] and store.results["q7"]["stage"] == "generate"
    assert all(store.results[f"q{i}"]["score"] == 1.0 for i in range(20) if i != 7)


class ConcurrentEngine:
    """Declares overlapping calls safe (as vLLM's AsyncLLM does) and records how many overlap."""

    concurrent = True

    def __init__(self):
        self.in_flight = self.peak = 0

    async def agenerate(self, prompts, params):
        self.in_flight += 1
        self.peak = max(self.peak, self.in_flight)
        await asyncio.sleep(0.05)
        self.in_flight -= 1
        return [[SimpleNamespace(text=p)] for p in prompts]


def test_a_concurrent_engine_gets_several_calls_in_flight_and_a_blocking_one_never(tmp_path):
    engine = ConcurrentEngine()
    summary = run(ITEMS, ResultStore(tmp_path / "c.jsonl"), engine, batch_size=1, concurrency=4)
    assert summary.score == 1.0 and summary.scored == 20
    assert engine.peak > 1 and engine.peak <= 4
    blocking = ConcurrentEngine()
    blocking.concurrent = False
    assert run(ITEMS, ResultStore(tmp_path / "b.jsonl"), blocking, batch_size=1, concurrency=4).scored == 20
    assert blocking.peak == 1
