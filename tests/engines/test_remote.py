"""RemoteEngine for real: an `EngineWorker` (HF engine) in a local Ray actor on a tiny model.

Its generations must equal the in-process HFEngine's for the same checkpoint, prompts and seed:
both run `HFEngine.generate` on CPU with float32, so the seeded sampling draws the same tokens.
"""

from __future__ import annotations

import asyncio
import time

import pytest
import ray

from evr1.engines import Engine, SamplingParams
from evr1.engines.hf import HFEngine
from evr1.engines.remote import RemoteEngine, remote_engine
from evr1.models import load_adapter
from evr1.cluster.connect import ensure_ray

from .conftest import clip


@pytest.fixture(scope="module")
def remote(engine_dirs):
    ensure_ray(None, num_cpus=2, object_store_mb=128)  # tests/conftest.py shuts Ray down at the end
    eng = remote_engine(engine_dirs["qwen3_vl"], "hf", batch_size=2, dtype="float32")
    yield eng
    eng.shutdown()


def _prompts(adapter):
    f = adapter.family.factor
    return [adapter.encode_prompt("<video> What moves?", videos=[clip(f, seed=1)]),
            adapter.encode_prompt("Say yes or no."),
            adapter.encode_prompt("Count in <video>", videos=[clip(f, seed=2, t=6)])]


def _ids(rows):
    return [[(g.token_ids, g.text, g.finish_reason) for g in row] for row in rows]


def test_remote_generations_equal_in_process_ones(remote, engine_dirs):
    local = HFEngine.from_pretrained(engine_dirs["qwen3_vl"], batch_size=2, device="cpu")
    prompts = _prompts(local.adapter)
    params = SamplingParams(n=2, max_new_tokens=8, temperature=1.0, seed=7)
    expected = local.generate(prompts, params)
    assert isinstance(remote, Engine)
    got = remote.generate(prompts, params)
    assert _ids(got) == _ids(expected)
    assert [len(row) for row in got] == [2, 2, 2]
    # agenerate awaits the ObjectRef: same answer, no worker thread involved.
    assert _ids(asyncio.run(remote.agenerate(prompts, params))) == _ids(expected)
    greedy = SamplingParams(n=1, max_new_tokens=5, temperature=0.0)
    assert _ids(remote.generate(prompts[:1], greedy)) == _ids(local.generate(prompts[:1], greedy))


def test_shutdown_kills_the_actor(engine_dirs, remote):
    # A second, short-lived actor: the module's one stays up for the other test.
    eng = remote_engine(engine_dirs["qwen3_vl"], "hf", batch_size=1, dtype="float32")
    assert isinstance(eng, RemoteEngine)
    eng.shutdown()
    # ray.kill is asynchronous: a call racing it may still be served, so poll until the actor is gone.
    deadline = time.monotonic() + 60
    while True:
        try:
            ray.get(eng.actor.__ray_ready__.remote(), timeout=10)
        except ray.exceptions.RayActorError:
            break
        assert time.monotonic() < deadline, "the actor was still alive 60 s after shutdown()"
        time.sleep(0.5)


def test_a_worker_that_cannot_start_fails_at_once(tmp_path, remote):
    # A directory that is no checkpoint: the actor's constructor fails, and remote_engine says so itself
    # instead of handing back an engine whose every call would fail. (Not "no vLLM here": the vLLM
    # job's environment has it, and both environments run this test.)
    not_a_model = tmp_path / "not_a_model"
    not_a_model.mkdir()
    with pytest.raises(ray.exceptions.RayError, match="config.json"):
        remote_engine(not_a_model, "hf", batch_size=1, dtype="float32")


def test_an_hf_engine_worker_is_not_concurrent_and_serves_calls_one_at_a_time(engine_dirs):
    eng = remote_engine(engine_dirs["qwen3_vl"], "hf", batch_size=1, dtype="float32", asynchronous=True)
    try:
        assert eng.concurrent is False  # HF generate is blocking and not thread-safe
        prompt = load_adapter(engine_dirs["qwen3_vl"]).encode_prompt("Hello")
        params = SamplingParams(n=1, max_new_tokens=3, temperature=0.0, seed=0)

        async def both():
            return await asyncio.gather(eng.agenerate([prompt], params), eng.agenerate([prompt], params))

        a, b = asyncio.run(both())
        assert a[0][0].token_ids == b[0][0].token_ids  # two overlapping calls, same greedy answer
    finally:
        eng.shutdown()
