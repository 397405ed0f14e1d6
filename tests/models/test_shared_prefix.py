"""Shared prompt prefix and reused vision features equal the plain `response_log_probs` path, per family."""

from __future__ import annotations

import pytest
import torch

from evr1.models import (
    encode_visual,
    grouped_response_log_probs,
    load_model,
    response_log_probs,
    response_log_probs_with_visual,
)

from .conftest import FAMILY_NAMES, make_clip

TEMPERATURE = 0.7


def _prompt(ad, kind: str):
    f = ad.family.factor
    if kind == "video_image":
        return ad.encode_prompt("Compare <video> with <image>", videos=[make_clip(f, t=4, seed=2)],
                                images=[make_clip(f, t=1, seed=3).frames[0]])
    if kind == "image":
        return ad.encode_prompt("<image> What colour?", images=[make_clip(f, t=1, h_blocks=3, seed=4).frames[0]])
    return ad.encode_prompt("Answer with a letter.")


def _responses(ad):
    """Different lengths (right padding), a one-token and an empty response, a sampled vision token."""
    return [[20, 21, 22, 23, 24, ad.eos_token_ids[0]], [30, 31], [40, ad.vision_token_ids[1], 42, 43], [50], []]


def _loss(log_probs, entropy, mask):
    """A GRPO-shaped scalar: advantage-weighted token log-probs, token-mean, minus an entropy bonus."""
    adv = torch.linspace(-1.0, 1.0, log_probs.shape[0])[:, None]
    return -(adv * log_probs).sum() / mask.sum() - 0.01 * entropy.sum() / mask.sum()


def _grads(model):
    return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def _assert_grads_close(ref, got, rtol):
    assert ref.keys() == got.keys() and any("visual" in n for n in ref)
    for name, g in ref.items():
        scale = g.abs().max().clamp_min(1e-6)
        assert (g - got[name]).abs().max() <= rtol * scale, name


@pytest.mark.parametrize("kind", ["video_image", "image", "text"])
@pytest.mark.parametrize("family", FAMILY_NAMES)
def test_shared_prefix_log_probs_equal_unshared(adapters, models, family, kind):
    ad, model = adapters[family], models[family]
    prompt, responses = _prompt(ad, kind), _responses(ad)
    batch = ad.collate([prompt] * len(responses), responses)
    with torch.no_grad():
        ref, ref_ent = response_log_probs(model, batch, temperature=TEMPERATURE, with_entropy=True)
        got, ent = grouped_response_log_probs(model, ad, prompt, responses, temperature=TEMPERATURE, with_entropy=True)
    assert got.shape == ent.shape == ref.shape == (5, 6)
    assert torch.allclose(got, ref, atol=1e-5) and torch.allclose(ent, ref_ent, atol=1e-5)
    assert (got[batch.response_mask == 0] == 0).all()  # padding, the empty response and the vision token


@pytest.mark.parametrize("family", FAMILY_NAMES)
def test_reused_visual_features_equal_pixels(adapters, models, family):
    ad, model = adapters[family], models[family]
    prompt, responses = _prompt(ad, "video_image"), _responses(ad)
    batch = ad.collate([prompt] * len(responses), responses)
    with torch.no_grad():
        ref, ref_ent = response_log_probs(model, batch, temperature=TEMPERATURE, with_entropy=True)
        visual = encode_visual(model, ad.collate([prompt]))
        tiled, ent = response_log_probs_with_visual(model, batch, visual.repeat(len(responses)),
                                                    temperature=TEMPERATURE, with_entropy=True)
        shared, _ = grouped_response_log_probs(model, ad, prompt, responses, temperature=TEMPERATURE, visual=visual)
    assert len(visual) == 2  # one video, one image
    assert torch.allclose(tiled, ref, atol=1e-5) and torch.allclose(ent, ref_ent, atol=1e-5)
    assert torch.allclose(shared, ref, atol=1e-5)


@pytest.mark.parametrize("family", FAMILY_NAMES)
def test_shared_prefix_and_reused_features_give_the_same_loss_and_gradients(tiny_dirs, adapters, family):
    ad = adapters[family]
    model = load_model(tiny_dirs[family]).train()
    prompt, responses = _prompt(ad, "video_image"), _responses(ad)
    batch = ad.collate([prompt] * len(responses), responses)

    lp, ent = response_log_probs(model, batch, temperature=TEMPERATURE, with_entropy=True)
    ref_loss = _loss(lp, ent, batch.response_mask)
    ref_loss.backward()
    ref = _grads(model)

    model.zero_grad(set_to_none=True)
    lp, ent = grouped_response_log_probs(model, ad, prompt, responses, temperature=TEMPERATURE, with_entropy=True)
    loss = _loss(lp, ent, batch.response_mask)
    loss.backward()
    shared = _grads(model)

    model.zero_grad(set_to_none=True)
    visual = encode_visual(model, ad.collate([prompt]))  # with grad: the tower is trained through the reuse
    lp, ent = grouped_response_log_probs(model, ad, prompt, responses, temperature=TEMPERATURE, with_entropy=True,
                                         visual=visual)
    _loss(lp, ent, batch.response_mask).backward()
    reused = _grads(model)

    assert torch.allclose(loss, ref_loss, atol=1e-5)
    # Qwen3.5's gated delta rule runs in chunks; splitting prompt and responses moves the chunk edges.
    rtol = 1e-3 if family == "qwen3_5" else 1e-4
    _assert_grads_close(ref, shared, rtol)
    _assert_grads_close(ref, reused, rtol)


@pytest.mark.parametrize("family", ["qwen2_5_vl", "qwen3_vl"])
def test_vision_tower_runs_once_per_prompt(adapters, models, family):
    ad, model = adapters[family], models[family]
    calls = []
    handle = model.model.visual.register_forward_hook(lambda *_: calls.append(1))
    try:
        prompt, responses = _prompt(ad, "video_image"), _responses(ad)
        with torch.no_grad():
            response_log_probs(model, ad.collate([prompt] * len(responses), responses))
            unshared = len(calls)
            grouped_response_log_probs(model, ad, prompt, responses)
            shared = len(calls) - unshared
            visual = encode_visual(model, ad.collate([prompt]))
            encoded = len(calls) - unshared - shared
            grouped_response_log_probs(model, ad, prompt, responses, visual=visual)
            response_log_probs_with_visual(model, ad.collate([prompt] * len(responses), responses),
                                           visual.repeat(len(responses)))
            reused = len(calls) - unshared - shared - encoded
    finally:
        handle.remove()
    # one tower call per modality: the batch of 5 rows, the prompt once, and none once features exist
    assert (unshared, shared, encoded, reused) == (2, 2, 2, 0)


def test_bad_arguments_are_refused(adapters, models):
    ad, model = adapters["qwen3_vl"], models["qwen3_vl"]
    prompt = _prompt(ad, "text")
    with pytest.raises(ValueError, match="temperature"):
        grouped_response_log_probs(model, ad, prompt, [[5]], temperature=0)
    with pytest.raises(ValueError, match="no responses"):
        grouped_response_log_probs(model, ad, prompt, [])


@pytest.mark.parametrize("family", ["qwen3_vl", "qwen3_5"])
def test_one_token_and_empty_groups(adapters, models, family):
    ad, model = adapters[family], models[family]
    prompt = _prompt(ad, "image")
    for responses in ([[25], [26], [27]], [[], []]):
        with torch.no_grad():
            ref, _ = response_log_probs(model, ad.collate([prompt] * len(responses), responses))
            got, _ = grouped_response_log_probs(model, ad, prompt, responses)
        assert got.shape == ref.shape and torch.allclose(got, ref, atol=1e-5)


def test_gradient_checkpointing_is_refused_with_grad_and_paused_without(tiny_dirs, adapters):
    ad = adapters["qwen3_vl"]
    model = load_model(tiny_dirs["qwen3_vl"]).train()
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    prompt, responses = _prompt(ad, "video_image"), _responses(ad)
    with pytest.raises(ValueError, match="gradient checkpointing"):
        grouped_response_log_probs(model, ad, prompt, responses)
    with torch.no_grad():
        ref, _ = response_log_probs(model, ad.collate([prompt] * len(responses), responses))
        got, _ = grouped_response_log_probs(model, ad, prompt, responses)
    assert torch.allclose(got, ref, atol=1e-5)
    assert all(m.gradient_checkpointing for m in model.modules() if hasattr(m, "gradient_checkpointing")
               and type(m).__name__.endswith("DecoderLayer"))
