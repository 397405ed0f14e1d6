"""HFEngine with precomputed vision features (`encode_visual`, `generate(visual=...)`): the same
samples and log-probs as its own encoding, the tower not run again, once per prompt whatever `n`."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from evr1.engines import SamplingParams
from evr1.engines.hf import HFEngine
from evr1.models import encode_visual
from evr1.models.runtime import VisionPassCounter
from evr1.models.shared_prefix import VisualFeatures, media_counts

from .conftest import clip


@pytest.fixture(scope="module", params=["qwen2_5_vl", "qwen3_vl"])
def engine(request, engine_dirs):
    eng = HFEngine.from_pretrained(engine_dirs[request.param], batch_size=3)
    return eng, VisionPassCounter(eng.model)


def _prompts(eng):
    ad, f = eng.adapter, eng.adapter.family.factor
    return [
        ad.encode_prompt("<video> What moves?", videos=[clip(f, seed=1)]),
        ad.encode_prompt("Say yes or no."),
        ad.encode_prompt("<image> Which color?", images=[np.full((2 * f, 3 * f, 3), 200, dtype=np.uint8)]),
        ad.encode_prompt("<video> and <image>: count", videos=[clip(f, seed=2, t=6)],
                         images=[np.full((2 * f, 2 * f, 3), 90, dtype=np.uint8)]),
    ]


def _out(rows):
    return [[(g.token_ids, g.finish_reason, g.logprobs) for g in row] for row in rows]


PARAMS = [
    {"n": 3, "max_new_tokens": 8, "temperature": 1.0, "seeds": (11, 12, 13, 14), "logprobs": True},  # the trainer's
    {"n": 3, "max_new_tokens": 8, "temperature": 0.8, "top_p": 0.9, "seed": 5, "logprobs": True},  # batched chunks
    {"n": 2, "max_new_tokens": 6, "temperature": 0.0, "logprobs": True},  # greedy
]


@pytest.mark.parametrize("params", PARAMS, ids=["seeds", "batched", "greedy"])
def test_shared_features_give_the_engines_own_samples_and_log_probs_without_the_tower(engine, params):
    eng, passes = engine
    p = _prompts(eng)
    sp = SamplingParams(**params)
    passes.take()
    own = _out(eng.generate(p, sp))
    media = sum(sum(media_counts(q).values()) for q in p)
    assert passes.take() == media  # once per image / video, not once per sample (n > 1)

    features = [eng.encode_visual([q])[0] for q in p]  # each prompt alone, as a rank encodes
    assert passes.take() == media
    assert features[1] is None and all(f is not None for i, f in enumerate(features) if i != 1)
    assert _out(eng.generate(p, sp, visual=features)) == own
    assert passes.take() == 0  # the tower never ran
    # On the CPU, from another device's copy, and with some left for the engine to encode itself.
    cpu = [f.to("cpu") if f is not None else None for f in features]
    assert _out(eng.generate(p, sp, visual=[cpu[0], None, None, cpu[3]])) == own
    assert passes.take() == 1  # the image prompt's


def test_encode_visual_equals_the_trainers_encoding_and_concat_splits_back(engine):
    eng, _ = engine
    p = _prompts(eng)
    together = eng.encode_visual(p)  # one tower call over all four
    for q, got in zip(p, together):
        if not media_counts(q):
            assert got is None
            continue
        want = encode_visual(eng.model, eng.adapter.collate([q]).to(eng.device, dtype=eng.model.dtype))
        assert set(got.outputs) == set(want.outputs)
        for kind in want.outputs:
            for a, b in zip(got.outputs[kind].pooler_output, want.outputs[kind].pooler_output, strict=True):
                torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    parts = [f for f in together if f is not None]
    again = VisualFeatures.concat(parts).split([media_counts(q) for q in p if media_counts(q)])
    for a, b in zip(again, parts):
        for kind in b.outputs:
            assert all(x is y for x, y in zip(a.outputs[kind].pooler_output, b.outputs[kind].pooler_output))
    with pytest.raises(ValueError, match="left over"):
        VisualFeatures.concat(parts).split([media_counts(p[0])])


def test_features_that_do_not_fit_the_prompt_or_the_model_are_refused(engine):
    eng, _ = engine
    p = _prompts(eng)
    features = eng.encode_visual(p)
    sp = SamplingParams(n=1, max_new_tokens=2, seeds=(1, 2, 3, 4))
    with pytest.raises(ValueError, match="visual features for a call of"):
        eng.generate(p, sp, visual=features[:2])
    with pytest.raises(ValueError, match="the prompt holds"):
        eng.generate(p, sp, visual=[features[3], None, features[2], features[3]])
    half = [VisualFeatures({k: type(v)(pooler_output=tuple(t.bfloat16() for t in v.pooler_output))
                            for k, v in f.outputs.items()}) if f is not None else None for f in features]
    with pytest.raises(ValueError, match="for a model in"):
        eng.generate(p, sp, visual=half)
