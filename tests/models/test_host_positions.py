"""Rope positions worked out on the host (`with_host_positions`) and the packed layout made there give
the model's own results exactly, per family: the forward that skips `get_rope_index` on the device
computes the same thing (issue 33, item 11)."""

from __future__ import annotations

import pytest
import torch

from evr1.models import grouped_response_log_probs, response_log_probs, runtime
from evr1.models import shared_prefix as shared_prefix_module
from evr1.models.packed import (
    host_prepared,
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
def test_chunked_valid_positions_made_on_the_host(adapters, models, family, monkeypatch):
    """The chunked log-probs take their valid response positions from the host (`response_index`, made
    by `host_prepared`): the same log-probs, entropy and gradients as the `nonzero` on the device gives,
    and that `nonzero` is not run."""
    ad, model = adapters[family], models[family]
    host = host_prepared(model, _batch(ad), packed=False)
    assert torch.equal(host.response_index, host.response_mask.reshape(-1).bool().nonzero().squeeze(1))
    results = []
    for batch in (_batch(ad).to("cpu"), host.to("cpu")):
        if batch.response_index is not None:
            monkeypatch.setattr(runtime, "valid_index", lambda mask: pytest.fail("nonzero run on the device"))
        model.zero_grad(set_to_none=True)
        lp, ent = response_log_probs(model, batch, temperature=TEMPERATURE, with_entropy=True, chunk_tokens=3)
        (lp.sum() + 0.01 * ent.sum()).backward()
        results.append((lp.detach(), ent.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}))
    model.zero_grad(set_to_none=True)
    (before, ent_before, grads_before), (after, ent_after, grads_after) = results
    assert torch.equal(before, after) and torch.equal(ent_before, ent_after) and before.abs().sum() > 0
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
    laid = host_prepared(model, _batch(ad), packed=True)
    assert torch.equal(laid.packed.keep, packed_layout(model, with_host_positions(model, _batch(ad))).keep)
    laid = laid.to("cpu")
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
