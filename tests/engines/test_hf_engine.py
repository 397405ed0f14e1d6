"""HFEngine on real tiny checkpoints: shapes, seeding, vision-token suppression, finish reasons."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from evr1.engines import Engine, Generation, SamplingParams, make_engine
from evr1.engines.base import cut_at_stop, finish
from evr1.engines.hf import HFEngine

from .conftest import clip

NORM = "model.language_model.norm.weight"


@pytest.fixture(scope="module", params=["qwen2_5_vl", "qwen3_vl"])
def engine(request, engine_dirs):
    return HFEngine.from_pretrained(engine_dirs[request.param], batch_size=2)


@pytest.fixture(scope="module")
def uniform_engine(engine_dirs):
    """A checkpoint whose final norm is zeroed through `update_weights`: every logit is exactly 0, so
    sampling is uniform over the vocabulary and vision tokens and eos are drawn at a known rate."""
    eng = HFEngine.from_pretrained(engine_dirs["qwen3_vl"], batch_size=4)
    eng.update_weights({NORM: torch.zeros_like(eng.model.state_dict()[NORM])})
    return eng


def _video_prompts(eng):
    f = eng.adapter.family.factor
    return [
        eng.adapter.encode_prompt("<video> What moves?", videos=[clip(f, seed=1)]),
        eng.adapter.encode_prompt("Count in <video>", videos=[clip(f, seed=2, t=6)]),
    ]


def test_n_samples_per_prompt_and_seed_reproduces(engine):
    prompts = _video_prompts(engine)
    params = SamplingParams(n=3, max_new_tokens=12, temperature=1.0, seed=11)
    first = engine.generate(prompts, params)
    assert isinstance(engine, Engine)
    assert [len(g) for g in first] == [3, 3]
    assert all(isinstance(g, Generation) and 1 <= len(g.token_ids) <= 12 for row in first for g in row)
    again = engine.generate(prompts, params)
    assert [[g.token_ids for g in row] for row in again] == [[g.token_ids for g in row] for row in first]
    other = engine.generate(prompts, SamplingParams(n=3, max_new_tokens=12, temperature=1.0, seed=12))
    assert [[g.token_ids for g in row] for row in other] != [[g.token_ids for g in row] for row in first]
    for row in first:
        for g in row:
            assert g.text == engine.adapter.decode(g.token_ids)


def test_image_text_and_video_prompts_in_one_batch(engine):
    ad = engine.adapter
    f = ad.family.factor
    prompts = [
        ad.encode_prompt("<image> Which color?", images=[np.full((2 * f, 3 * f, 3), 200, dtype=np.uint8)]),
        ad.encode_prompt("Say yes or no."),
        ad.encode_prompt("<video>", videos=[clip(f, seed=3)]),
    ]
    out = engine.generate(prompts, SamplingParams(n=2, max_new_tokens=5, seed=0))
    assert [len(g) for g in out] == [2, 2, 2]


def test_greedy_gives_identical_independent_copies(engine):
    prompts = _video_prompts(engine)[:1]
    (row,) = engine.generate(prompts, SamplingParams(n=3, max_new_tokens=6, temperature=0.0))
    assert row[0].token_ids == row[1].token_ids == row[2].token_ids
    assert row[0] is not row[1]


def test_generation_restores_training_mode(engine):
    engine.model.train()
    try:
        engine.generate(_video_prompts(engine)[:1], SamplingParams(max_new_tokens=2, seed=0))
        assert engine.model.training
    finally:
        engine.model.eval()


def test_vision_tokens_suppressed_where_plain_generate_samples_them(uniform_engine):
    eng = uniform_engine
    prompts = _video_prompts(eng)
    params = SamplingParams(n=8, max_new_tokens=64, temperature=1.0, seed=5)
    vision = set(eng.adapter.vision_token_ids)
    out = eng.generate(prompts, params)
    assert not any(vision & set(g.token_ids) for row in out for g in row)
    # control, same seed and model, without suppression: uniform sampling over 640 tokens draws
    # vision tokens (4 of them) at ~0.6% per token, so 1024 tokens contain some
    batch = eng.adapter.collate(prompts)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(5)
        raw = eng.model.generate(**batch.model_inputs(), do_sample=True, max_new_tokens=64, num_return_sequences=8,
                                 top_k=0, eos_token_id=eng.adapter.eos_token_ids, pad_token_id=eng.adapter.pad_token_id)
    assert vision & set(raw[:, batch.prompt_length :].flatten().tolist())


def test_finish_reasons_match_the_tokens(uniform_engine):
    eng = uniform_engine
    eos = set(eng.adapter.eos_token_ids)
    params = SamplingParams(n=8, max_new_tokens=200, seed=9)
    out = [g for row in eng.generate(_video_prompts(eng), params) for g in row]
    reasons = {g.finish_reason for g in out}
    assert reasons == {"stop", "length"}  # P(eos within 200 uniform draws) ≈ 46% per sample, seeded
    for g in out:
        assert not eos & set(g.token_ids[:-1])
        if g.finish_reason == "stop":
            assert g.token_ids[-1] in eos
        else:
            assert len(g.token_ids) == 200 and g.token_ids[-1] not in eos


def test_finish_cuts_at_first_eos():
    assert finish([5, 6, 2, 0, 0], [2, 0], 5) == ([5, 6, 2], "stop")
    assert finish([5, 6, 7], [2], 3) == ([5, 6, 7], "length")


def test_agenerate_matches_generate(engine):
    prompts = _video_prompts(engine)
    params = SamplingParams(n=2, max_new_tokens=4, seed=3)
    sync = engine.generate(prompts, params)
    async_ = asyncio.run(engine.agenerate(prompts, params))
    assert [[g.token_ids for g in r] for r in async_] == [[g.token_ids for g in r] for r in sync]


def test_update_weights_in_place_and_errors(engine_dirs):
    eng = make_engine("hf", model_dir=str(engine_dirs["qwen2_5_vl"]), batch_size=1, dtype="float32")
    assert isinstance(eng, HFEngine)
    param = dict(eng.model.named_parameters())[NORM]
    eng.update_weights([(NORM, torch.full_like(param, 2.0))])
    assert dict(eng.model.named_parameters())[NORM] is param and torch.all(param == 2.0)
    with pytest.raises(KeyError, match="no_such"):
        eng.update_weights({"no_such.weight": torch.zeros(1)})
    with pytest.raises(ValueError, match="shape"):
        eng.update_weights({NORM: torch.zeros(3)})


def test_registry_and_lazy_imports():
    with pytest.raises(ValueError, match="unknown engine 'nope'"):
        make_engine("nope")
    with pytest.raises(ValueError, match="top_p"):
        SamplingParams(top_p=0)
    code = (
        "import sys, evr1.engines\n"
        "assert 'evr1.engines.vllm_engine' not in sys.modules and 'vllm' not in sys.modules\n"
        "assert 'transformers' not in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=Path(__file__).resolve().parents[2])


def test_stop_strings_end_a_response_where_they_complete(engine):
    """A stop string taken from the middle of a sampled response ends that response right after it
    (kept, finish reason "stop"); the tokens before it are those sampled without the stop."""
    prompts = _video_prompts(engine)
    params = SamplingParams(n=3, max_new_tokens=16, temperature=1.0, seed=5)
    free = engine.generate(prompts, params)
    longest = max((g for row in free for g in row), key=lambda g: len(g.token_ids))
    assert len(longest.token_ids) >= 8
    stop = engine.adapter.decode(longest.token_ids[4:6])
    assert stop.strip()
    stopped = engine.generate(prompts, SamplingParams(n=3, max_new_tokens=16, temperature=1.0, seed=5, stop=[stop]))
    hits = 0
    for row_free, row_stop in zip(free, stopped):
        for f, s in zip(row_free, row_stop):
            assert f.token_ids[: len(s.token_ids)] == s.token_ids  # same draws up to the stop
            if stop in f.text:
                hits += 1
                assert s.finish_reason == "stop" and stop in s.text
                assert stop not in engine.adapter.decode(s.token_ids[:-1])  # cut at the completing token
                assert len(s.token_ids) < len(f.token_ids) or f.text.endswith(stop)
            else:
                assert s.token_ids == f.token_ids and s.finish_reason == f.finish_reason
    assert hits >= 1
    with pytest.raises(ValueError, match="stop"):
        SamplingParams(stop=[""])


def test_cut_at_stop_finds_a_string_split_across_tokens():
    pieces = {1: "<", 2: "/ans", 3: "wer>", 4: "x"}

    def decode(ids):
        return "".join(pieces[i] for i in ids)

    assert cut_at_stop([4, 1, 2, 3, 4, 4], decode, ["</answer>"]) == [4, 1, 2, 3]
    assert cut_at_stop([1, 2, 3], decode, ["</answer>"]) == [1, 2, 3]
    assert cut_at_stop([4, 1, 2, 3, 1, 2, 3], decode, ["x<", "</answer>"]) == [4, 1]  # the first to complete
    assert cut_at_stop([4, 4], decode, ["</answer>"]) is None
    assert cut_at_stop([], decode, ["</answer>"]) is None
