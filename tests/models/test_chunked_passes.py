"""Every log-prob pass the trainer uses (padded, packed, shared prefix, precomputed features) gives the
same log-probs, entropy and parameter gradients with the output head applied chunk by chunk
(`chunk_tokens`, `runtime.chunked_token_log_probs`) as with the full logits."""

from __future__ import annotations

import pytest
import torch

from evr1.models import (
    encode_visual,
    grouped_response_log_probs,
    response_log_probs,
    response_log_probs_with_visual,
)
from evr1.models.packed import packed_response_log_probs

from .conftest import make_clip

TEMPERATURE = 0.7
CHUNK = 3  # several chunks per pass, one of them partial


def _prompts(ad):
    f = ad.family.factor
    return [
        ad.encode_prompt("Compare <video> with <image>", videos=[make_clip(f, t=4, seed=2)],
                         images=[make_clip(f, t=1, seed=3).frames[0]]),
        ad.encode_prompt("<image> What colour?", images=[make_clip(f, t=1, h_blocks=3, seed=4).frames[0]]),
        ad.encode_prompt("Answer with a letter."),
    ]


def _responses(ad):
    return [[20, 21, 22, 23, 24, ad.eos_token_ids[0]], [30, 31], [40, ad.vision_token_ids[1], 42, 43], [50], []]


def _loss(lp, ent, mask):
    adv = torch.linspace(-1.0, 1.0, lp.shape[0])[:, None]
    return -(adv * lp).sum() / mask.sum() - 0.01 * ent.sum() / mask.sum()


def _run(model, fn, mask):
    """(log-probs, entropy, gradients) of `fn(chunk_tokens)` for None and CHUNK."""
    out = {}
    for chunk in (None, CHUNK):
        model.zero_grad(set_to_none=True)
        lp, ent = fn(chunk)
        _loss(lp, ent, mask).backward()
        out[chunk] = (lp.detach(), ent.detach(), {n: p.grad.clone() for n, p in model.named_parameters()
                                                   if p.grad is not None})
    model.zero_grad(set_to_none=True)
    return out[None], out[CHUNK]


def _assert_same(full, chunked, mask):
    (lp, ent, grads), (clp, cent, cgrads) = full, chunked
    torch.testing.assert_close(clp, lp, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(cent, ent, rtol=1e-5, atol=1e-5)
    assert (clp[mask == 0] == 0).all() and (cent[mask == 0] == 0).all()
    assert grads.keys() == cgrads.keys() and any("lm_head" in n or "embed_tokens" in n for n in grads)
    for name, g in grads.items():
        assert (g - cgrads[name]).abs().max() <= 1e-4 * g.abs().max().clamp_min(1e-6), name


@pytest.mark.parametrize("family", ["qwen2_5_vl", "qwen3_vl"])
def test_padded_and_packed_passes(adapters, models, family):
    ad, model = adapters[family], models[family]
    prompts = _prompts(ad)
    batch = ad.collate([prompts[0], prompts[1], prompts[2], prompts[0], prompts[2]], _responses(ad)).to("cpu")
    for fn in (response_log_probs, packed_response_log_probs):
        full, chunked = _run(model, lambda c: fn(model, batch, temperature=TEMPERATURE, with_entropy=True,
                                                 chunk_tokens=c), batch.response_mask)
        _assert_same(full, chunked, batch.response_mask)


@pytest.mark.parametrize("family", ["qwen2_5_vl", "qwen3_vl", "qwen3_5"])
def test_shared_prefix_pass(adapters, models, family):
    ad, model = adapters[family], models[family]
    prompt, responses = _prompts(ad)[0], _responses(ad)
    mask = ad.collate([prompt] * len(responses), responses).response_mask
    full, chunked = _run(model, lambda c: grouped_response_log_probs(
        model, ad, prompt, responses, temperature=TEMPERATURE, with_entropy=True, chunk_tokens=c), mask)
    _assert_same(full, chunked, mask)


def test_precomputed_features_pass(adapters, models):
    ad, model = adapters["qwen3_vl"], models["qwen3_vl"]
    prompt, responses = _prompts(ad)[0], _responses(ad)
    batch = ad.collate([prompt] * len(responses), responses).to("cpu")

    def fn(chunk):
        visual = encode_visual(model, ad.collate([prompt]).to("cpu")).repeat(len(responses))
        return response_log_probs_with_visual(model, batch, visual, temperature=TEMPERATURE, with_entropy=True,
                                              chunk_tokens=chunk)
    full, chunked = _run(model, fn, batch.response_mask)
    _assert_same(full, chunked, batch.response_mask)


def test_the_head_is_restored_after_a_chunked_pass(adapters, models):
    ad, model = adapters["qwen2_5_vl"], models["qwen2_5_vl"]
    batch = ad.collate([_prompts(ad)[2]], [[20, 21]]).to("cpu")
    with torch.no_grad():
        packed_response_log_probs(model, batch, chunk_tokens=1)
        logits = model(**batch.model_inputs(), use_cache=False).logits
    assert logits.shape[-1] == model.get_output_embeddings().weight.shape[0]  # logits again, not hidden states
