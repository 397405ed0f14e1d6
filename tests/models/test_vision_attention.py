"""The vision tower's windows in one attention call (`evr1.models.vision_attention`) give the per-window
path's values and gradients: the function on random windows, and whole models of the four families."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

from evr1.models import load_adapter, load_model, make_tiny, response_log_probs
from evr1.models.vision_attention import VARLEN_SDPA, use_varlen_vision_attention, varlen_sdpa
from tests.models.conftest import make_clip


def _per_window(q, k, v, lengths, scale):
    """transformers' sdpa path: split by window, one call each, concatenated along the sequence."""
    outs = [F.scaled_dot_product_attention(a, b, c, scale=scale)
            for a, b, c in zip(*(torch.split(t, lengths, dim=2) for t in (q, k, v)))]
    return torch.cat(outs, dim=2).transpose(1, 2)  # [1, S, h, d]


@pytest.mark.parametrize("lengths", [[5, 16, 1, 9, 16], [8, 8, 8, 8], [7]], ids=["uneven", "equal", "one"])
def test_varlen_sdpa_equals_one_call_per_window_values_and_gradients(lengths):
    torch.manual_seed(0)
    heads, dim, seq = 3, 8, sum(lengths)
    q, k, v = (torch.randn(1, heads, seq, dim, dtype=torch.float64, requires_grad=True) for _ in range(3))
    cu = torch.tensor([0] + lengths).cumsum(0).to(torch.int32)
    want = _per_window(q, k, v, lengths, 0.3)
    got, weights = varlen_sdpa(None, q, k, v, scaling=0.3, cu_seq_lens_q=cu, max_length_q=max(lengths))
    assert weights is None and got.shape == (1, seq, heads, dim)
    torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-10)
    probe = torch.randn_like(want)
    grads_want = torch.autograd.grad((want * probe).sum(), (q, k, v))
    grads_got = torch.autograd.grad((got * probe).sum(), (q, k, v))
    for a, b in zip(grads_got, grads_want):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-10)
    # Without the longest window given (a caller that did not compute it): the same result.
    again, _ = varlen_sdpa(None, q, k, v, scaling=0.3, cu_seq_lens_q=cu)
    torch.testing.assert_close(again, want, rtol=1e-10, atol=1e-10)


def test_varlen_sdpa_refuses_what_it_does_not_implement():
    q = torch.randn(1, 2, 4, 8)
    with pytest.raises(ValueError, match="cu_seq_lens_q"):
        varlen_sdpa(None, q, q, q)
    with pytest.raises(ValueError, match="non-causal"):
        varlen_sdpa(None, q, q, q, cu_seq_lens_q=torch.tensor([0, 4]), is_causal=True)


@pytest.mark.parametrize("family", ["qwen2_vl", "qwen2_5_vl", "qwen3_vl", "qwen3_5"])
def test_models_give_the_per_window_log_probs_and_gradients(tmp_path, family, monkeypatch):
    """Two videos of different sizes whose grids do not divide into Qwen2.5-VL's windows (uneven windows),
    vision depth 2 (a window block and a full-attention block): log-probs and every vision parameter's
    gradient equal the stock per-window path's (fp32)."""
    model_dir = make_tiny(family, tmp_path / family, seed=0, vision_depth=2)
    ad = load_adapter(model_dir)
    f = ad.family.factor
    clips = [make_clip(f, t=4, h_blocks=5, w_blocks=6, seed=1), make_clip(f, t=2, h_blocks=3, w_blocks=2, seed=2)]
    prompts = [ad.encode_prompt("<video> What happens?", videos=[c]) for c in clips]
    batch = ad.collate(prompts, [[20, 21, 22], [30, 31]]).to("cpu", torch.float32)
    calls = []

    def counted(*args, **kwargs):
        calls.append(kwargs["cu_seq_lens_q"].shape[0] - 1)
        return varlen_sdpa(*args, **kwargs)

    monkeypatch.setitem(ALL_ATTENTION_FUNCTIONS._global_mapping, VARLEN_SDPA, counted)
    results = {}
    for name in ("stock", "varlen"):
        model = load_model(model_dir).train()
        assert model.model.visual.config._attn_implementation == VARLEN_SDPA  # load_model switches it
        assert model.config.vision_config._attn_implementation == "sdpa"  # what is saved stays sdpa
        if name == "stock":
            model.model.visual.config._attn_implementation = "sdpa"
        lp, _ = response_log_probs(model, batch)
        lp.sum().backward()
        grads = {n: p.grad.clone() for n, p in model.model.visual.named_parameters() if p.grad is not None}
        results[name] = lp.detach(), grads
    assert len(calls) == 2 and min(calls) > 2, calls  # each of the two blocks: one call for all its windows
    (lp_stock, g_stock), (lp_varlen, g_varlen) = results["stock"], results["varlen"]
    torch.testing.assert_close(lp_varlen, lp_stock, rtol=1e-5, atol=1e-5)
    assert g_stock and set(g_stock) == set(g_varlen)
    for n in g_stock:
        torch.testing.assert_close(g_varlen[n], g_stock[n], rtol=1e-4, atol=1e-5, msg=n)


def test_only_an_sdpa_model_is_switched(tmp_path):
    model_dir = make_tiny("qwen2_5_vl", tmp_path / "m", seed=0)
    eager = load_model(model_dir, attn_implementation="eager")
    assert eager.model.visual.config._attn_implementation == "eager"
    assert not use_varlen_vision_attention(eager)
    text_only = torch.nn.Linear(2, 2)
    assert not use_varlen_vision_attention(text_only)


def test_the_saved_config_keeps_sdpa_and_builds_anywhere(tmp_path):
    """A switched model saves "sdpa" and its config builds a model with stock transformers' validation."""
    from transformers import AutoConfig, AutoModelForImageTextToText

    model = load_model(make_tiny("qwen2_5_vl", tmp_path / "m", seed=0))
    assert model.model.visual.config._attn_implementation == VARLEN_SDPA
    with torch.device("meta"):
        AutoModelForImageTextToText.from_config(model.config)  # a flash-named config would be refused here
    model.save_pretrained(tmp_path / "saved")
    saved = AutoConfig.from_pretrained(tmp_path / "saved")
    assert VARLEN_SDPA not in (tmp_path / "saved" / "config.json").read_text()
    assert saved.vision_config._attn_implementation in (None, "sdpa")
