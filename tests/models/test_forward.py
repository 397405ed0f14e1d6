"""collate + forward for every family; response_log_probs against generate's own logits; gradients."""

from __future__ import annotations

import pytest
import torch

from evr1.models import response_log_probs

from .conftest import FAMILY_NAMES, make_clip


def _greedy_with_logits(model, adapter, prompts, max_new_tokens=6):
    batch = adapter.collate(prompts)
    with torch.no_grad():
        out = model.generate(
            **batch.model_inputs(), max_new_tokens=max_new_tokens, min_new_tokens=max_new_tokens, do_sample=False,
            suppress_tokens=adapter.vision_token_ids, eos_token_id=adapter.eos_token_ids,
            pad_token_id=adapter.pad_token_id, return_dict_in_generate=True, output_logits=True,
        )
    responses = out.sequences[:, batch.prompt_length :]
    # output_logits are the raw logits, before suppress_tokens: log-softmax at temperature 1
    ref = torch.stack(out.logits, dim=1).float().log_softmax(-1).gather(-1, responses[..., None]).squeeze(-1)
    return responses.tolist(), ref


@pytest.mark.parametrize("family", FAMILY_NAMES)
def test_log_probs_equal_generate_logits(adapters, models, family):
    ad, model = adapters[family], models[family]
    f = ad.family.factor
    prompts = [
        ad.encode_prompt("<video> What moves?", videos=[make_clip(f, t=4, seed=1)]),
        ad.encode_prompt("Compare <video> with <image>", videos=[make_clip(f, t=2, h_blocks=3, seed=2)],
                         images=[make_clip(f, t=1, seed=3).frames[0]]),
        ad.encode_prompt("Answer with a letter."),
    ]
    responses, ref = _greedy_with_logits(model, ad, prompts)
    batch = ad.collate(prompts, responses)
    with torch.no_grad():
        log_probs, entropy = response_log_probs(model, batch, with_entropy=True)
    assert log_probs.shape == entropy.shape == (3, 6)
    assert torch.allclose(log_probs, ref, atol=1e-4)
    assert (entropy > 0).all() and (entropy <= torch.log(torch.tensor(float(model.config.text_config.vocab_size))) + 1e-4).all()


@pytest.mark.parametrize("family", FAMILY_NAMES)
def test_left_padding_does_not_change_log_probs(adapters, models, family):
    ad, model = adapters[family], models[family]
    f = ad.family.factor
    long = ad.encode_prompt("<video> a much longer question about the moving square", videos=[make_clip(f, seed=4)])
    short = ad.encode_prompt("<video>", videos=[make_clip(f, seed=5)])
    response = [20, 30, 40, 50]
    with torch.no_grad():
        alone, _ = response_log_probs(model, ad.collate([short], [response]))
        padded, _ = response_log_probs(model, ad.collate([long, short], [response[:2], response]))
    assert padded.shape == (2, 4)
    assert torch.allclose(padded[1], alone[0], atol=1e-5)
    assert padded[0, 2:].abs().sum() == 0  # beyond the shorter response: masked to 0


@pytest.mark.parametrize("family", FAMILY_NAMES)
def test_gradients_reach_the_vision_tower(tiny_dirs, adapters, family):
    from evr1.models import load_model

    model = load_model(tiny_dirs[family]).train()
    ad = adapters[family]
    prompt = ad.encode_prompt("<video> Which way?", videos=[make_clip(ad.family.factor, seed=6)])
    batch = ad.collate([prompt], [[25, 26, 27, ad.eos_token_ids[0]]])
    log_probs, _ = response_log_probs(model, batch, temperature=0.7)
    assert log_probs.requires_grad
    (-log_probs.sum()).backward()
    vision = [p.grad for n, p in model.named_parameters() if "visual" in n]
    assert vision and all(g is not None for g in vision)
    assert sum(g.abs().sum() for g in vision) > 0


def test_temperature_must_be_positive(adapters, models):
    ad = adapters["qwen3_vl"]
    batch = ad.collate([ad.encode_prompt("hi")], [[5]])
    with pytest.raises(ValueError, match="temperature"):
        response_log_probs(models["qwen3_vl"], batch, temperature=0)
