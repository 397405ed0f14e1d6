"""Per-prompt sampling seeds (`SamplingParams.seeds`): a prompt's samples are its own, whatever call,
order, batch size or engine instance it lands in, so 1 engine and N engines sample the same."""

from __future__ import annotations

import asyncio
import dataclasses
import pickle

import numpy as np
import pytest

from evr1.engines import SamplingParams
from evr1.engines.hf import HFEngine

from .conftest import clip

PARAMS = {"n": 4, "max_new_tokens": 8, "temperature": 1.0}


@pytest.fixture(scope="module", params=["qwen2_5_vl", "qwen3_vl"])
def engines(request, engine_dirs):
    """Two instances of one checkpoint: batch size 8 and batch size 1."""
    return (HFEngine.from_pretrained(engine_dirs[request.param], batch_size=8),
            HFEngine.from_pretrained(engine_dirs[request.param], batch_size=1))


def _prompts(eng):
    ad = eng.adapter
    f = ad.family.factor
    return [
        ad.encode_prompt("<video> What moves?", videos=[clip(f, seed=1)]),
        ad.encode_prompt("Say yes or no, then explain at length."),
        ad.encode_prompt("<image> Which color?", images=[np.full((2 * f, 3 * f, 3), 200, dtype=np.uint8)]),
        ad.encode_prompt("Count in <video>", videos=[clip(f, seed=2, t=6)]),
    ]


def _ids(rows):
    return [[g.token_ids for g in row] for row in rows]


def test_a_prompts_samples_do_not_depend_on_call_order_batch_size_or_engine(engines):
    big, small = engines
    p = _prompts(big)

    def params(*seeds: int) -> SamplingParams:
        return SamplingParams(**PARAMS, seeds=seeds)

    for k in range(len(p)):
        (alone,) = _ids(big.generate([p[k]], params(100 + k)))
        assert len(alone) == 4
        others = [j for j in range(len(p)) if j != k][::-1]
        order = others[:1] + [k] + others[1:]  # k second, the others reversed around it
        mixed = _ids(big.generate([p[j] for j in order], params(*(100 + j for j in order))))
        assert mixed[1] == alone, f"prompt {k}: samples changed with the other prompts of the call"
        one_by_one = _ids(small.generate([p[j] for j in order[::-1]], params(*(100 + j for j in order[::-1]))))
        assert one_by_one[-2] == alone, f"prompt {k}: samples changed with the batch size / engine instance"
    # `seed` is ignored when `seeds` is given
    with_seed = big.generate(p[:2], SamplingParams(**PARAMS, seed=5, seeds=(100, 101)))
    assert _ids(with_seed) == _ids(big.generate(p[:2], params(100, 101)))


def test_different_seeds_give_different_samples_and_equal_seeds_equal_ones(engines):
    big, _ = engines
    p = _prompts(big)[0]
    rows = _ids(big.generate([p, p, p], SamplingParams(**PARAMS, seeds=(7, 7, 1_000_003))))
    assert rows[0] == rows[1]
    assert rows[0] != rows[2]
    assert len({tuple(s) for s in rows[0]}) > 1  # the n samples of one prompt differ among themselves


def test_greedy_with_seeds_stays_batched_and_equals_greedy_without(engines):
    big, _ = engines
    p = _prompts(big)
    greedy = {"n": 2, "max_new_tokens": 6, "temperature": 0.0}
    calls = []
    original = big._generate_chunk
    big._generate_chunk = lambda chunk, config, seed: calls.append(len(chunk)) or original(chunk, config, seed)
    try:
        seeded = big.generate(p, SamplingParams(**greedy, seeds=(1, 2, 3, 4)))
    finally:
        del big._generate_chunk
    assert calls == [4]  # one batch of all four prompts
    assert _ids(seeded) == _ids(big.generate(p, SamplingParams(**greedy)))


def test_sampling_with_seeds_is_one_batched_call_per_chunk(engines):
    """Per-prompt seeds no longer cost a call per prompt: each of a prompt's n samples is a row of the
    chunk's one call, drawn from a generator of its own (`RowSeededSampler`), the tower run once per
    prompt (the rows share its features)."""
    big, _ = engines
    p = _prompts(big)
    calls = []
    original = big._generate_chunk

    def spy(chunk, config, seed, **extra):
        calls.append((len(chunk), config.do_sample, len(extra["sampler"].seeds), len(extra["visual"])))
        return original(chunk, config, seed, **extra)

    big._generate_chunk = spy
    encoded = []
    original_encode = big.encode_visual
    big.encode_visual = lambda prompts: encoded.append(len(prompts)) or original_encode(prompts)
    try:
        rows = big.generate(p, SamplingParams(**PARAMS, seeds=(1, 2, 3, 4)))
    finally:
        del big._generate_chunk, big.encode_visual
    n = PARAMS["n"]
    assert calls == [(4 * n, False, 4 * n, 4 * n)]  # one call: every sample a row, greedy over the sampler's scores
    assert encoded == [3]  # the three prompts with media, once each, not once per sample
    assert [len(r) for r in rows] == [n] * 4


def test_agenerate_with_seeds_matches_generate(engines):
    big, _ = engines
    p = _prompts(big)[:2]
    params = SamplingParams(**PARAMS, seeds=(3, 4))
    assert _ids(asyncio.run(big.agenerate(p, params))) == _ids(big.generate(p, params))


def test_seeds_length_must_match_the_prompts(engines):
    big, _ = engines
    p = _prompts(big)[:2]
    with pytest.raises(ValueError, match=r"field seeds has 3 seeds for a call of 2 prompts"):
        big.generate(p, SamplingParams(**PARAMS, seeds=(1, 2, 3)))
    with pytest.raises(ValueError, match=r"field seeds has 1 seeds for a call of 2 prompts"):
        big.generate(p, SamplingParams(n=1, max_new_tokens=2, temperature=0.0, seeds=(1,)))  # greedy too


def test_seeds_survive_pickle_and_ray_as_a_tuple_of_ints():
    params = SamplingParams(seeds=[3, np.int64(4)], stop=["</answer>"])
    assert params.seeds == (3, 4) and all(type(s) is int for s in params.seeds)
    again = pickle.loads(pickle.dumps(params))
    assert again == params and isinstance(again.seeds, tuple)
    as_dict = dataclasses.asdict(params)  # what RemoteEngine sends; a list may come back
    as_dict["seeds"] = list(as_dict["seeds"])
    assert SamplingParams(**as_dict).seeds == (3, 4)
    assert SamplingParams().seeds == () and SamplingParams().prompt_seeds(5) is None
    for bad in ([1.5], [True], [-1], [2**63], ["1"]):
        with pytest.raises(ValueError, match="field seeds"):
            SamplingParams(seeds=bad)
