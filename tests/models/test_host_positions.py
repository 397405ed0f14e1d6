"""Rope positions worked out on the host (`with_host_positions`) and the packed layout made there give
the model's own results exactly, per family: the forward that skips `get_rope_index` on the device
computes the same thing (issue 33, item 11)."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from evr1.models import grouped_response_log_probs, response_log_probs
from evr1.models import shared_prefix as shared_prefix_module
from evr1.models.packed import (
    packed_layout,
    packed_response_log_probs,
    supports_packing,
)
from evr1.models.positions import with_host_positions

from .conftest import FAMILY_NAMES, make_clip
from .test_packed import TEMPERATURE, _batch

PACKED = [f for f in FAMILY_NAMES if supports_packing(f)]


@pytest.mark.parametrize("family", FAMILY_NAMES)
def test_host_positions_are_the_models_own(adapters, models, family):
    ad, model = adapters[family], models[family]
    host = _batch(ad)
    placed = with_host_positions(model, host)
    grids = {k: host.mm[k] for k in ("image_grid_thw", "video_grid_thw", "second_per_grid_ts") if k in host.mm}
    expected, deltas = model.model.get_rope_index(input_ids=host.input_ids, mm_token_type_ids=host.mm_token_type_ids,
                                                  attention_mask=host.attention_mask, **grids)
    assert torch.equal(placed.position_ids, expected) and torch.equal(placed.rope_deltas, deltas.reshape(-1, 1))
    assert "position_ids" in placed.to("cpu").model_inputs() and "position_ids" not in host.model_inputs()
    results = []
    for batch in (host.to("cpu"), placed.to("cpu")):  # the update's pass too: its gradients
        model.zero_grad(set_to_none=True)
        lp, ent = response_log_probs(model, batch, temperature=TEMPERATURE, with_entropy=True)
        (lp.sum() + 0.01 * ent.sum()).backward()
        results.append((lp.detach(), ent.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}))
    model.zero_grad(set_to_none=True)
    (before, ent_before, grads_before), (after, ent_after, grads_after) = results
    assert torch.equal(before, after) and torch.equal(ent_before, ent_after)
    assert grads_before.keys() == grads_after.keys()
    assert all(torch.equal(grads_before[n], grads_after[n]) for n in grads_before)


@pytest.mark.parametrize("family", FAMILY_NAMES)
def test_text_only_batch_keeps_the_models_positions(adapters, models, family):
    """Without grids the model's positions are `arange`, not the mask's cumsum: nothing is precomputed."""
    ad, model = adapters[family], models[family]
    batch = ad.collate([ad.encode_prompt("Answer with a letter."), ad.encode_prompt("Think, then answer.")], [[5, 6], [7]])
    assert with_host_positions(model, batch).position_ids is None


@pytest.mark.parametrize("family", PACKED)
def test_packed_layout_made_on_the_host(adapters, models, family):
    ad, model = adapters[family], models[family]
    host = with_host_positions(model, _batch(ad))
    laid = replace(host, packed=packed_layout(model, host)).to("cpu")
    plain = _batch(ad).to("cpu")
    with torch.no_grad():
        ref, ref_ent = packed_response_log_probs(model, plain, temperature=TEMPERATURE, with_entropy=True)
        lp, ent = packed_response_log_probs(model, laid, temperature=TEMPERATURE, with_entropy=True)
        chunked, _ = packed_response_log_probs(model, laid, temperature=TEMPERATURE, chunk_tokens=3)
        ref_chunked, _ = packed_response_log_probs(model, plain, temperature=TEMPERATURE, chunk_tokens=3)
    assert torch.equal(lp, ref) and torch.equal(ent, ref_ent) and torch.equal(chunked, ref_chunked)
    # The layout is used as given: the positions are not asked of the model again.
    calls = []
    original = model.model.get_rope_index
    model.model.get_rope_index = lambda *a, **k: calls.append(1) or original(*a, **k)
    try:
        with torch.no_grad():
            packed_response_log_probs(model, laid, temperature=TEMPERATURE)
    finally:
        del model.model.get_rope_index
    assert not calls


@pytest.mark.parametrize("family", FAMILY_NAMES)
def test_shared_prefix_with_host_positions(adapters, models, family, monkeypatch):
    """The grouped pass (prompt once, its n responses on its cache) gives the same log-probs with the
    prompt's positions and rope offset from the host as with the model working them out."""
    ad, model = adapters[family], models[family]
    prompt = ad.encode_prompt("<video> What moves?", videos=[make_clip(ad.family.factor, t=6, h_blocks=3, seed=5)])
    responses = [[20, 21, 22, ad.eos_token_ids[0]], [30], [40, 41]]
    with torch.no_grad():
        host, host_ent = grouped_response_log_probs(model, ad, prompt, responses, temperature=TEMPERATURE,
                                                    with_entropy=True)
        monkeypatch.setattr(shared_prefix_module, "with_host_positions", lambda model, batch: batch)
        device, device_ent = grouped_response_log_probs(model, ad, prompt, responses, temperature=TEMPERATURE,
                                                        with_entropy=True)
    assert torch.equal(host, device) and torch.equal(host_ent, device_ent)
