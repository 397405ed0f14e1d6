"""Log-probs and entropy from hidden states and the output head, chunk by chunk over the valid response
tokens only (`runtime.chunked_token_log_probs`): the same values and gradients as today's full-logits
`token_log_probs`, padding never computed, no [·, V] tensor larger than a chunk, on the tiny models too."""

from __future__ import annotations

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from evr1.models.runtime import (
    chunked_token_log_probs,
    hidden_instead_of_logits,
    response_log_probs,
    token_log_probs,
)

from .conftest import FAMILY_NAMES, make_clip


def _inputs(b=3, length=11, h=16, v=97, *, bias=False, seed=0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    hidden = torch.randn(b, length, h, generator=g, dtype=dtype).requires_grad_()
    weight = (torch.randn(v, h, generator=g, dtype=dtype) / h ** 0.5).requires_grad_()
    bias_t = torch.randn(v, generator=g, dtype=dtype).requires_grad_() if bias else None
    targets = torch.randint(0, v, (b, length), generator=g)
    mask = torch.rand(b, length, generator=g) > 0.35
    mask[0, -4:] = False  # right padding
    return hidden, weight, bias_t, targets, mask


def _grads(tensors, loss):
    """d loss / d tensors (None where a tensor does not reach the loss)."""
    return list(torch.autograd.grad(loss, tensors, retain_graph=True, allow_unused=True))


@pytest.mark.parametrize("temperature", [1.0, 0.6, 1.7])
@pytest.mark.parametrize("chunk", [1, 4, 1000])
@pytest.mark.parametrize("bias", [False, True])
def test_equal_to_full_logits_values_and_gradients(temperature, chunk, bias):
    hidden, weight, b, targets, mask = _inputs(bias=bias)
    params = [hidden, weight] + ([b] if bias else [])
    g = torch.Generator().manual_seed(1)
    w_lp, w_ent = torch.randn(mask.shape, generator=g), torch.randn(mask.shape, generator=g)

    ref_lp, ref_ent = token_log_probs(torch.nn.functional.linear(hidden, weight, b), targets, mask, temperature, True)
    ref = _grads(params, (ref_lp * w_lp + ref_ent * w_ent).sum())
    lp, ent = chunked_token_log_probs(hidden, weight, targets, mask, temperature, True, bias=b, chunk_tokens=chunk)
    got = _grads(params, (lp * w_lp + ent * w_ent).sum())

    assert lp.dtype == ent.dtype == torch.float32 and lp.shape == ent.shape == mask.shape
    torch.testing.assert_close(lp, ref_lp, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(ent, ref_ent, rtol=1e-5, atol=1e-5)
    for r, x in zip(ref, got):
        torch.testing.assert_close(x, r, rtol=1e-4, atol=1e-5)
    assert (lp[~mask] == 0).all() and (ent[~mask] == 0).all()


def test_log_probs_alone_and_entropy_alone_get_their_gradients():
    hidden, weight, _, targets, mask = _inputs(seed=2)
    ref_lp, ref_ent = token_log_probs(hidden @ weight.T, targets, mask, 0.8, True)
    lp, ent = chunked_token_log_probs(hidden, weight, targets, mask, 0.8, True, chunk_tokens=5)
    for got, ref in zip(_grads([hidden, weight], lp.sum()), _grads([hidden, weight], ref_lp.sum())):
        torch.testing.assert_close(got, ref, rtol=1e-4, atol=1e-5)
    for got, ref in zip(_grads([hidden, weight], ent.sum()), _grads([hidden, weight], ref_ent.sum())):
        torch.testing.assert_close(got, ref, rtol=1e-4, atol=1e-5)
    lp, none = chunked_token_log_probs(hidden, weight, targets, mask, 0.8, False, chunk_tokens=5)
    assert none is None
    for got, ref in zip(_grads([hidden, weight], lp.sum()), _grads([hidden, weight], ref_lp.sum())):
        torch.testing.assert_close(got, ref, rtol=1e-4, atol=1e-5)


def test_bf16_head_matches_the_full_logits_path():
    """The model-dtype matmul, then fp32: as `token_log_probs(lm_head(hidden))` does under bf16."""
    hidden, weight, _, targets, mask = _inputs(h=32, v=211, dtype=torch.bfloat16, seed=3)
    ref_lp, ref_ent = token_log_probs(hidden @ weight.T, targets, mask, 1.0, True)
    lp, ent = chunked_token_log_probs(hidden, weight, targets, mask, 1.0, True, chunk_tokens=7)
    torch.testing.assert_close(lp, ref_lp, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(ent, ref_ent, rtol=1e-5, atol=1e-5)
    for got, ref in zip(_grads([hidden, weight], (lp + ent).sum()), _grads([hidden, weight], (ref_lp + ref_ent).sum())):
        assert got.dtype == torch.bfloat16
        torch.testing.assert_close(got.float(), ref.float(), rtol=2e-2, atol=2e-2)


def test_padding_positions_are_never_computed():
    """NaN hidden states at every padded position: nothing of them reaches the results or the gradients."""
    hidden, weight, _, targets, mask = _inputs(seed=4)
    poisoned = hidden.detach().clone()
    poisoned[~mask] = float("nan")
    poisoned.requires_grad_()
    lp, ent = chunked_token_log_probs(poisoned, weight, targets, mask, 1.0, True, chunk_tokens=3)
    grad_hidden, grad_weight = _grads([poisoned, weight], lp.sum() + ent.sum())
    assert torch.isfinite(lp).all() and torch.isfinite(ent).all()
    assert torch.isfinite(grad_weight).all() and (grad_hidden[~mask] == 0).all() and torch.isfinite(grad_hidden).all()
    ref, _ = chunked_token_log_probs(hidden, weight, targets, mask, 1.0, True, chunk_tokens=3)
    torch.testing.assert_close(lp, ref.detach())


def test_empty_and_all_padding_masks():
    hidden, weight, _, targets, mask = _inputs(seed=5)
    lp, ent = chunked_token_log_probs(hidden, weight, targets, torch.zeros_like(mask), 1.0, True)
    assert (lp == 0).all() and (ent == 0).all()
    for g in _grads([hidden, weight], lp.sum() + ent.sum()):
        assert g is None or (g == 0).all()
    lp, ent = chunked_token_log_probs(hidden[:, :0], weight, targets[:, :0], mask[:, :0], 1.0, True)
    assert lp.shape == ent.shape == (3, 0)
    with pytest.raises(ValueError, match="temperature"):
        chunked_token_log_probs(hidden, weight, targets, mask, 0.0)
    with pytest.raises(ValueError, match="chunk_tokens"):
        chunked_token_log_probs(hidden, weight, targets, mask, chunk_tokens=0)


class _LargestVocabBlock(TorchDispatchMode):
    """The largest tensor any op allocates whose last dimension is the vocabulary (views, and the
    head's own gradient [V, H], aside)."""

    def __init__(self, vocab: int, head_shape: torch.Size):
        super().__init__()
        self.vocab, self.head_shape, self.largest = vocab, head_shape, 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func.is_view or func._schema.is_mutable:  # no new memory
            return out
        for t in out if isinstance(out, (tuple, list)) else [out]:
            if isinstance(t, torch.Tensor) and t.dim() >= 2 and t.shape[-1] == self.vocab and t.shape != self.head_shape:
                self.largest = max(self.largest, t.numel())
        return out


@pytest.mark.parametrize("with_entropy", [False, True])
def test_no_vocab_block_larger_than_a_chunk(with_entropy):
    """Forward and backward: every [·, V] tensor is at most chunk × V (today's path: B × L × V)."""
    hidden, weight, _, targets, mask = _inputs(b=4, length=40, v=301, seed=6)
    chunk = 8
    with _LargestVocabBlock(301, weight.shape) as today:
        lp, ent = token_log_probs(hidden @ weight.T, targets, mask, 0.9, with_entropy)
        (lp.sum() + (ent.sum() if with_entropy else 0)).backward()
    with _LargestVocabBlock(301, weight.shape) as chunked:
        lp, ent = chunked_token_log_probs(hidden, weight, targets, mask, 0.9, with_entropy, chunk_tokens=chunk)
        (lp.sum() + (ent.sum() if with_entropy else 0)).backward()
    assert today.largest == 4 * 40 * 301
    assert chunked.largest == chunk * 301


def test_hidden_instead_of_logits_restores_the_head_and_refuses_softcapping(models):
    model = models["qwen2_vl"]
    head = model.get_output_embeddings()
    ids = torch.tensor([[3, 4, 5, 6]])
    with torch.no_grad():
        logits = model(input_ids=ids, attention_mask=torch.ones_like(ids), use_cache=False).logits
        with hidden_instead_of_logits(model) as h:
            hidden = model(input_ids=ids, attention_mask=torch.ones_like(ids), use_cache=False).logits
        assert h is head and hidden.shape[-1] == head.in_features
        torch.testing.assert_close(head(hidden), logits)
        again = model(input_ids=ids, attention_mask=torch.ones_like(ids), use_cache=False).logits
    torch.testing.assert_close(again, logits)
    assert "forward" not in head.__dict__
    model.config.final_logit_softcapping = 30.0
    try:
        with pytest.raises(ValueError, match="final_logit_softcapping"), hidden_instead_of_logits(model):
            pass
    finally:
        del model.config.final_logit_softcapping
    assert "forward" not in head.__dict__


@pytest.mark.parametrize("family", FAMILY_NAMES)
def test_response_log_probs_chunked_equals_full_logits(adapters, tiny_dirs, family):
    """The whole model, video prompts of unequal lengths (padding on both sides), with gradients."""
    from evr1.models import load_model

    ad = adapters[family]
    model = load_model(tiny_dirs[family]).train()
    f = ad.family.factor
    prompts = [ad.encode_prompt("<video> What moves, and where?", videos=[make_clip(f, t=4, seed=11)]),
               ad.encode_prompt("Answer with a letter.")]
    batch = ad.collate(prompts, [[20, 21, 22, 23, 24, ad.eos_token_ids[0]], [30, 31]])
    ref_lp, ref_ent = response_log_probs(model, batch, temperature=0.7, with_entropy=True)
    ref = _grads([p for p in model.parameters() if p.requires_grad], (ref_lp.sum() + 0.1 * ref_ent.sum()))
    lp, ent = response_log_probs(model, batch, temperature=0.7, with_entropy=True, chunk_tokens=3)
    got = _grads([p for p in model.parameters() if p.requires_grad], (lp.sum() + 0.1 * ent.sum()))
    torch.testing.assert_close(lp, ref_lp, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(ent, ref_ent, rtol=1e-5, atol=1e-5)
    for x, r in zip(got, ref):
        if r is None:
            assert x is None or (x == 0).all()
        else:
            torch.testing.assert_close(x, r, rtol=1e-4, atol=1e-5)
