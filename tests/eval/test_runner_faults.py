"""The async runner under real faults (tests/eval/test_runner.py covers scripted ones: a load error, an
Event-blocked load, an engine error, a torn last line, retries):

- a real kill: the evaluation runs in a subprocess that is SIGKILLed mid-run, then resumes in-process;
- a real hang: PyAV opening a named pipe (FIFO) with no writer blocks in open(2) forever: the
  item is a timeout, the run finishes, items behind hung loads still load, the process can exit;
  evr1's FrameReader itself refuses a FIFO at once ("not a regular file") and never reaches it;
- ordering: items whose loads complete in exactly reverse order still get their own results.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import av
import pytest

from evr1.cache import FrameReader
from evr1.data import make_synthetic
from evr1.engines import SamplingParams
from evr1.eval import ResultStore, run_items
from evr1.video.clip import FrameParams

REPO = Path(__file__).resolve().parents[2]


class EchoEngine:
    """Answers each prompt with itself; logs every call's prompts to `log` (one JSON line per call)."""

    def __init__(self, log: Path | None = None):
        self.log, self.calls = log, []

    async def agenerate(self, prompts, params):
        self.calls.append(list(prompts))
        if self.log:
            with self.log.open("a") as f:
                f.write(json.dumps(list(prompts)) + "\n")
        return [[SimpleNamespace(text=p)] for p in prompts]


def exact(text, item):
    return {"score": float(text == item["answer"])}


def run(items, store, engine, load, **kw):
    return asyncio.run(run_items(items, load=load, engine=engine, score=exact, store=store,
                                 sampling=SamplingParams(n=1, max_new_tokens=4), **kw))


def lines(path: Path) -> list[dict]:
    out = []
    for raw in path.read_text().splitlines():
        try:
            out.append(json.loads(raw))
        except json.JSONDecodeError:
            pass
    return out


# ---- a real kill --------------------------------------------------------------------------------
CHILD = """
import asyncio, json, sys
from pathlib import Path
from types import SimpleNamespace
from evr1.engines import SamplingParams
from evr1.eval import ResultStore, run_items

results, log, n = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3])

class Engine:
    calls = 0
    async def agenerate(self, prompts, params):
        self.calls += 1
        with log.open("a") as f:
            f.write(json.dumps(list(prompts)) + "\\n")
        if self.calls == 5:
            await asyncio.sleep(3600)  # stuck in the 5th generation: the parent kills us here
        return [[SimpleNamespace(text=p)] for p in prompts]

items = [{"id": f"q{i}", "answer": f"a{i}"} for i in range(n)]
asyncio.run(run_items(items, load=lambda item: item["answer"], engine=Engine(),
                      score=lambda text, item: {"score": float(text == item["answer"])},
                      store=ResultStore(results), sampling=SamplingParams(n=1, max_new_tokens=4),
                      concurrency=2, batch_size=2, timeout_s=3600))
"""


def wait_until(condition, proc: subprocess.Popen, what: str, limit_s: float = 60.0) -> None:
    deadline = time.monotonic() + limit_s
    while not condition():
        if proc.poll() is not None:
            raise AssertionError(f"the child exited ({proc.returncode}) before {what}: {proc.stderr.read()}")
        if time.monotonic() > deadline:
            proc.kill()
            raise AssertionError(f"gave up waiting for {what}")
        time.sleep(0.01)


def test_resume_after_a_real_sigkill(tmp_path):
    n = 16
    results, child_log = tmp_path / "results.jsonl", tmp_path / "child_calls.jsonl"
    proc = subprocess.Popen([sys.executable, "-c", CHILD, str(results), str(child_log), str(n)], cwd=REPO,
                            env={**os.environ, "PYTHONPATH": str(REPO)}, stderr=subprocess.PIPE, text=True)
    try:
        calls = lambda: lines(child_log) if child_log.exists() else []  # noqa: E731
        wait_until(lambda: len(calls()) == 5, proc, "the 5th generation call")
        answered = {a for call in calls()[:4] for a in call}
        # Kill once the first four calls' results are all written (the scorer may still be writing).
        wait_until(lambda: results.exists() and len(lines(results)) == len(answered), proc, "the first results")
        proc.send_signal(signal.SIGKILL)
        assert proc.wait(30) == -signal.SIGKILL
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.stderr.close()
    before = {r["id"] for r in lines(results)}
    assert 4 <= len(before) < n and all("error" not in r for r in lines(results))

    items = [{"id": f"q{i}", "answer": f"a{i}"} for i in range(n)]
    engine = EchoEngine()
    summary = run(items, ResultStore(results), engine, lambda item: item["answer"], concurrency=2, batch_size=2)
    assert summary.scored == n and summary.failed == 0 and summary.score == 1.0
    # Every item has exactly one successful record in the file, and nothing is left torn.
    successes = [r["id"] for r in lines(results) if "error" not in r]
    assert sorted(successes) == sorted(i["id"] for i in items)
    assert len(results.read_text().splitlines()) == n
    # No item recorded before the kill ran again; every other item ran exactly once after it
    # (including the ones stuck in the killed 5th call, whose results were never written).
    rerun = [a for call in engine.calls for a in call]
    assert sorted(rerun) == sorted(i["answer"] for i in items if i["id"] not in before)


# ---- a real hang --------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def videos(tmp_path_factory):
    """Four short synthetic videos (regular files the real decoder reads)."""
    out = tmp_path_factory.mktemp("synth")
    report = make_synthetic(out, 4, heldout=0, image_fraction=0.0, seconds=1.0)
    rows = [json.loads(line) for line in Path(report.train_path).read_text().splitlines()]
    return [str(out / row["videos"][0]) for row in rows]


def fifo(path: Path) -> str:
    os.mkfifo(path)
    return str(path)


def release(paths) -> None:
    """Unblock every thread stuck opening these FIFOs (a writer appears), and make later opens fail."""
    for p in paths:
        if os.path.exists(p):
            fd = os.open(p, os.O_RDWR | os.O_NONBLOCK)
            os.unlink(p)
            os.close(fd)


def decoding_load(reader: FrameReader, stuck: threading.Event | None = None):
    """The item's video through raw PyAV (a FIFO blocks in `av.open`), then through evr1's FrameReader."""

    def load(item):
        try:
            with av.open(item["video"]) as container:
                assert container.streams.video
        finally:
            if stuck is not None and item["id"].startswith("fifo"):
                stuck.set()  # only ever reached once the test releases the pipe
        clip = reader.video(item["video"])
        return f"{item['id']}:{len(clip.frame_indices)}"

    return load


def video_items(videos, reader):
    return [{"id": f"v{k}", "video": v, "answer": f"v{k}:{len(reader.video(v).frame_indices)}"}
            for k, v in enumerate(videos)]


def test_a_fifo_is_refused_by_the_frame_reader_without_blocking(tmp_path, videos):
    reader = FrameReader(None, FrameParams(), mode="decode-only")
    pipe = fifo(tmp_path / "stuck.mp4")
    items = [*video_items(videos, reader), {"id": "fifo", "video": pipe, "answer": "?"}]
    try:
        store = ResultStore(tmp_path / "r.jsonl")
        summary = run(items, store, EchoEngine(),
                      lambda item: f"{item['id']}:{len(reader.video(item['video']).frame_indices)}",
                      concurrency=2, timeout_s=60)
    finally:
        release([pipe])
    assert summary.scored == 4 and summary.score == pytest.approx(4 / 5)
    rec = store.results["fifo"]
    assert rec["stage"] == "load" and "not a regular file" in rec["error"] and "timed out" not in rec["error"]


def test_a_decoder_blocked_forever_on_a_fifo_is_a_timeout_and_the_run_finishes(tmp_path, videos):
    reader = FrameReader(None, FrameParams(), mode="decode-only")
    pipe = fifo(tmp_path / "stuck.mp4")
    ok = video_items(videos, reader)
    items = [*ok[:2], {"id": "fifo", "video": pipe, "answer": "?"}, *ok[2:]]
    stuck = threading.Event()
    try:
        store = ResultStore(tmp_path / "r.jsonl")
        summary = run(items, store, EchoEngine(), decoding_load(reader, stuck), concurrency=2, timeout_s=2.0)
        # The run returned while PyAV was still blocked in open(2) on the pipe.
        assert not stuck.is_set()
    finally:
        release([pipe])
    assert store.results["fifo"] == {"id": "fifo", "group": "all", "score": 0.0, "error": "timed out after 2 s",
                                     "stage": "load"}
    assert summary.failed == 1 and summary.scored == 4 and summary.score == pytest.approx(4 / 5)
    assert stuck.wait(30)  # released: the thread left av.open (with an error), so nothing outlives the test


def test_as_many_hung_decoders_as_load_workers_do_not_time_out_the_items_behind_them(tmp_path, videos):
    # A pool of `concurrency` load threads would stay full of hung decoders, and the items behind
    # them would time out in its queue; abandoned daemon threads leave room for them.
    reader = FrameReader(None, FrameParams(), mode="decode-only")
    pipes = [fifo(tmp_path / f"stuck{k}.mp4") for k in range(2)]
    items = [{"id": f"fifo{k}", "video": p, "answer": "?"} for k, p in enumerate(pipes)] + video_items(videos, reader)
    try:
        store = ResultStore(tmp_path / "r.jsonl")
        summary = run(items, store, EchoEngine(), decoding_load(reader), concurrency=2, timeout_s=1.0)
    finally:
        release(pipes)
    assert {i for i, r in store.results.items() if "error" in r} == {"fifo0", "fifo1"}
    assert summary.scored == 4


HANGING_CHILD = """
import asyncio, sys
from types import SimpleNamespace
import av
from evr1.engines import SamplingParams
from evr1.eval import ResultStore, run_items

def load(item):
    with av.open(item["video"]):  # a FIFO without a writer: blocks in open(2) forever
        return "never"

class Engine:
    async def agenerate(self, prompts, params):
        return [[SimpleNamespace(text=p)] for p in prompts]

summary = asyncio.run(run_items([{"id": "fifo", "video": sys.argv[2]}], load=load, engine=Engine(),
                                score=lambda text, item: {"score": 1.0}, store=ResultStore(sys.argv[1]),
                                sampling=SamplingParams(n=1, max_new_tokens=4), timeout_s=0.5))
print("failed", summary.failed, flush=True)
"""


def test_the_process_exits_while_a_decoder_is_still_blocked(tmp_path):
    pipe = fifo(tmp_path / "stuck.mp4")
    proc = subprocess.Popen([sys.executable, "-c", HANGING_CHILD, str(tmp_path / "r.jsonl"), pipe], cwd=REPO,
                            env={**os.environ, "PYTHONPATH": str(REPO)}, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        # The interpreter joins ThreadPoolExecutor workers at exit, so a pool thread stuck in a
        # decoder would keep the finished evaluation's process alive forever.
        out, err = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise AssertionError("the evaluation finished but its process never exited") from None
    finally:
        release([pipe])
    assert proc.returncode == 0 and out.strip() == "failed 1", err
    assert json.loads((tmp_path / "r.jsonl").read_text())["error"] == "timed out after 0.5 s"


# ---- ordering -----------------------------------------------------------------------------------
@pytest.mark.parametrize("group_size", [1, 3])
def test_items_finishing_in_reverse_order_get_their_own_results(tmp_path, group_size):
    """Loads are chained so that group g may finish only after every item of group g+1 is recorded:
    results arrive in exactly reverse group order (groups of 3 can share an engine batch)."""
    n = 12
    items = [{"id": f"q{i:02d}", "answer": f"answer-{i}", "group": i // group_size} for i in range(n)]
    store = ResultStore(tmp_path / "r.jsonl")
    last_group = (n - 1) // group_size

    def load(item):
        later = [f"q{i:02d}" for i in range(n) if i // group_size == item["group"] + 1]
        deadline = time.monotonic() + 30
        while not all(store.done(i) for i in later):
            if time.monotonic() > deadline:
                raise TimeoutError(f"{item['id']}: group {item['group'] + 1} never finished")
            time.sleep(0.002)
        return item["answer"]

    # Every load must be in flight at once (each waits for later items), so concurrency = n.
    summary = run(items, store, EchoEngine(), load, concurrency=n, batch_size=3, queue_size=n, timeout_s=60)
    assert summary.scored == n and summary.failed == 0 and summary.score == 1.0
    recorded = lines(tmp_path / "r.jsonl")
    groups = [int(r["id"][1:]) // group_size for r in recorded]
    assert groups == sorted(groups, reverse=True) and groups[0] == last_group
    for r in recorded:
        assert r["output"] == f"answer-{int(r['id'][1:])}" and r["score"] == 1.0
