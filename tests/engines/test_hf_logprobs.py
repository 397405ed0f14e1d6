"""HFEngine's behaviour log-probs (`SamplingParams.logprobs`): each sampled token's log-prob under
the raw logits at the sampling temperature, as the trainer computes its own (`response_log_probs`,
`log_softmax(logits / T)`, no top-p / top-k filtering), greedy at T = 1; asking for them changes no
sample."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from evr1.engines import SamplingParams
from evr1.engines.hf import HFEngine
from evr1.models import response_log_probs

from .conftest import clip


@pytest.fixture(scope="module", params=["qwen2_5_vl", "qwen3_vl"])
def engine(request, engine_dirs):
    return HFEngine.from_pretrained(engine_dirs[request.param], batch_size=2)  # fp32 on the CPU


def _prompts(eng):
    ad, f = eng.adapter, eng.adapter.family.factor
    return [
        ad.encode_prompt("<video> What moves?", videos=[clip(f, seed=1)]),
        ad.encode_prompt("Say yes or no, then explain at length."),
        ad.encode_prompt("<image> Which color?", images=[np.full((2 * f, 3 * f, 3), 200, dtype=np.uint8)]),
    ]


def _trainer_log_probs(eng, prompts, rows, temperature):
    """The trainer's log-probs of every response (`response_log_probs` over collate(prompt, response))."""
    flat = [(p, g.token_ids) for p, row in zip(prompts, rows) for g in row]
    batch = eng.adapter.collate([p for p, _ in flat], [r for _, r in flat]).to(eng.device, dtype=eng.model.dtype)
    with torch.no_grad():
        lp, _ = response_log_probs(eng.model, batch, temperature=temperature)
    return [lp[i, : len(r)] for i, (_, r) in enumerate(flat)]


CASES = [
    ({"n": 3, "temperature": 1.0, "seeds": (7, 8, 9)}, 1.0),  # the trainer's path: per-prompt seeds
    ({"n": 3, "temperature": 1.0, "seed": 4}, 1.0),  # batched chunks, left padding
    ({"n": 2, "temperature": 0.7, "top_p": 0.8, "top_k": 20, "seed": 4}, 0.7),  # filters do not enter the log-probs
    ({"n": 2, "temperature": 0.0}, 1.0),  # greedy: at temperature 1
]


@pytest.mark.parametrize("case", CASES, ids=["seeds", "batched", "filtered", "greedy"])
def test_behaviour_log_probs_equal_the_trainers_and_change_no_sample(engine, case):
    kwargs, temperature = case
    p = _prompts(engine)
    plain = engine.generate(p, SamplingParams(max_new_tokens=10, **kwargs))
    rows = engine.generate(p, SamplingParams(max_new_tokens=10, logprobs=True, **kwargs))
    assert [[g.token_ids for g in r] for r in rows] == [[g.token_ids for g in r] for r in plain]
    assert all(g.logprobs is None for r in plain for g in r)
    want = _trainer_log_probs(engine, p, rows, temperature)
    got = [g for r in rows for g in r]
    for g, w in zip(got, want, strict=True):
        assert len(g.logprobs) == len(g.token_ids) and all(x <= 0 for x in g.logprobs)
        torch.testing.assert_close(torch.tensor(g.logprobs), w, rtol=0, atol=1e-4)
    if kwargs["temperature"] == 0:  # the copies are independent lists
        assert rows[0][0].logprobs == rows[0][1].logprobs and rows[0][0].logprobs is not rows[0][1].logprobs


def test_log_probs_are_cut_with_the_response_at_a_stop_string(engine):
    p = _prompts(engine)[1:2]
    free = engine.generate(p, SamplingParams(n=1, max_new_tokens=12, temperature=1.0, seed=3, logprobs=True))[0][0]
    # The first pair of sampled tokens (after the first two) whose text is not blank: the stop string.
    stops = [engine.adapter.decode(free.token_ids[k:k + 2]) for k in range(2, len(free.token_ids) - 2)]
    stop = next((s for s in stops if s.strip()), None)
    assert stop is not None, f"every sampled pair decodes to whitespace: {stops!r}"
    cut = engine.generate(p, SamplingParams(n=1, max_new_tokens=12, temperature=1.0, seed=3, logprobs=True,
                                            stop=(stop,)))[0][0]
    assert cut.finish_reason == "stop" and len(cut.token_ids) < len(free.token_ids)
    assert cut.logprobs == free.logprobs[: len(cut.token_ids)]
