"""Padding-free (packed) passes equal the padded `response_log_probs`, per family that supports packing."""

from __future__ import annotations

import pytest
import torch

from evr1.models import response_log_probs
from evr1.models.packed import packed_inputs, packed_response_log_probs, padding_share, supports_packing

from .conftest import FAMILY_NAMES, make_clip

TEMPERATURE = 0.7
PACKED = [f for f in FAMILY_NAMES if supports_packing(f)]


def _batch_prompts(ad):
    f = ad.family.factor
    return [
        ad.encode_prompt("Compare <video> with <image>", videos=[make_clip(f, t=4, seed=2)],
                         images=[make_clip(f, t=1, seed=3).frames[0]]),
        ad.encode_prompt("<video> What moves?", videos=[make_clip(f, t=6, h_blocks=3, seed=5)]),
        ad.encode_prompt("<image> What colour?", images=[make_clip(f, t=1, h_blocks=3, seed=4).frames[0]]),
        ad.encode_prompt("Answer with a letter."),
        ad.encode_prompt("Answer with a word, please, and think first."),
    ]


def _batch(ad):
    """Prompts of different lengths and media (video + image, a longer video, image, text only), responses
    of different lengths (one holding a sampled vision token, one empty): left and right padding both."""
    prompts = _batch_prompts(ad)
    responses = [[20, 21, 22, 23, 24, ad.eos_token_ids[0]], [30, 31], [40, ad.vision_token_ids[1], 42, 43], [50], []]
    return ad.collate(prompts, responses)


def _loss(lp, ent, mask):
    adv = torch.linspace(-1.0, 1.0, lp.shape[0])[:, None]
    return -(adv * lp).sum() / mask.sum() - 0.01 * ent.sum() / mask.sum()


@pytest.mark.parametrize("family", PACKED)
def test_packed_equals_padded(adapters, models, family):
    ad, model = adapters[family], models[family]
    batch = _batch(ad).to("cpu")
    inputs, _ = packed_inputs(model, batch)
    assert inputs["input_ids"].shape == (1, int(batch.attention_mask.sum()))  # no pad token is computed
    results = {}
    for name, fn in {"padded": response_log_probs, "packed": packed_response_log_probs}.items():
        model.zero_grad(set_to_none=True)
        lp, ent = fn(model, batch, temperature=TEMPERATURE, with_entropy=True)
        _loss(lp, ent, batch.response_mask).backward()
        grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
        results[name] = (lp.detach(), ent.detach(), grads)
    (lp, ent, grads), (plp, pent, pgrads) = results["padded"], results["packed"]
    assert torch.allclose(plp, lp, atol=1e-5) and torch.allclose(pent, ent, atol=1e-5)
    assert (plp[batch.response_mask == 0] == 0).all()
    assert grads.keys() == pgrads.keys() and any("visual" in n for n in grads)
    for name, g in grads.items():
        assert (g - pgrads[name]).abs().max() <= 1e-4 * g.abs().max().clamp_min(1e-6), name
    model.zero_grad(set_to_none=True)


def test_linear_attention_family_is_not_packed():
    assert not supports_packing("qwen3_5")  # its conv/recurrent state would cross sequence boundaries


def test_padding_share():
    assert padding_share([10, 10]) == 0.0
    assert padding_share([10, 30]) == pytest.approx(1 - 40 / 60)
    assert padding_share([]) == 0.0


@pytest.mark.parametrize("family", PACKED)
def test_precomputed_features_in_packed_and_padded_passes(adapters, models, family):
    """A batch carrying its vision features (`with_visual`, per-prompt features concatenated) gives the
    pixel path's log-probs, packed and padded, without running the tower."""
    from evr1.models import encode_visual
    from evr1.models.shared_prefix import VisualFeatures

    ad, model = adapters[family], models[family]
    pixels = _batch(ad).to("cpu")
    prompts = _batch_prompts(ad)
    with torch.no_grad():
        ref, _ = response_log_probs(model, pixels, temperature=TEMPERATURE)
        visual = VisualFeatures.concat([encode_visual(model, ad.collate([p]).to("cpu")) for p in prompts])
        batch = _batch(ad).with_visual(visual).to("cpu")
        assert "pixel_values_videos" not in batch.model_inputs() and not batch.pending_videos
        calls = []
        hook = model.model.visual.register_forward_pre_hook(lambda *a: calls.append(1))
        try:
            padded, _ = response_log_probs(model, batch, temperature=TEMPERATURE)
            packed, _ = packed_response_log_probs(model, batch, temperature=TEMPERATURE)
        finally:
            hook.remove()
    assert not calls  # the tower did not run
    assert torch.allclose(padded, ref, atol=1e-5) and torch.allclose(packed, ref, atol=1e-5)
