"""Sequence-parallel groups and the response log-probs of one sequence split over a group's ranks.

With `trainer.sequence_parallel = k`, consecutive ranks [0..k-1], [k..2k-1], ... of the FSDP2 world
form sequence-parallel groups. The k ranks of a group get the SAME micro-batch (data-parallel index
`rank // k`); each keeps a contiguous 1/k of every sequence's tokens through the decoder, attention
exchanging heads for tokens with all-to-all (`evr1.models.ulysses`), and the response log-probs are
summed over the group so that every rank holds the same [B, Lr] values.

What is split and what is not: the decoder's activations, the attention, the logits and the
log-softmax (each rank computes those of the response positions in its own slice) are split by k.
The vision tower runs on every rank of the group over all media of the batch (its output is then
scattered into the full embedding sequence and sliced, Qwen3-VL's deepstack features with it): each
rank keeps and back-propagates only its own tokens' features, so the tower's gradients, summed over
the group, are exact; its activations are not divided by k.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import evr1.models.lean_import  # noqa: F401,I001  (first: transformers then skips scikit-learn)
import torch
import torch.distributed as dist
from transformers import PreTrainedModel

from evr1.models.batch import ModelBatch
from evr1.models.runtime import (
    check_temperature,
    chunked_token_log_probs,
    hidden_instead_of_logits,
    response_log_probs,
    token_log_probs,
)
from evr1.models.ulysses import UlyssesState, enable_ulysses

# Families whose decoder is attention only. Qwen3.5's gated-delta-net layers carry a recurrent state
# along the sequence: splitting their tokens needs the state handed from rank to rank (a pipeline over
# the sequence, not an exchange of heads), which this module does not do.
SP_FAMILIES = frozenset({"qwen2_vl", "qwen2_5_vl", "qwen3_vl"})


@dataclass(frozen=True)
class SPGroups:
    """This rank's place: its sequence-parallel group, its rank in it, and its data-parallel index."""

    group: dist.ProcessGroup | None  # None when sp == 1
    sp_rank: int
    sp_size: int
    dp_rank: int
    dp_size: int


def sp_groups(world_size: int, sp: int) -> SPGroups:
    """Create the sequence-parallel groups of `sp` consecutive ranks. Collective: every rank of the
    default group must call it with the same arguments (`dist.new_group` creates every group on every rank)."""
    if sp < 1 or world_size % sp:
        raise ValueError(f"sequence_parallel={sp} must be >= 1 and divide the world size {world_size}")
    if dist.get_world_size() != world_size:
        raise ValueError(f"sp_groups: world_size={world_size} but torch.distributed has {dist.get_world_size()} ranks")
    rank = dist.get_rank()
    mine = None
    if sp > 1:
        for start in range(0, world_size, sp):
            group = dist.new_group(list(range(start, start + sp)))
            if start <= rank < start + sp:
                mine = group
    return SPGroups(group=mine, sp_rank=rank % sp, sp_size=sp, dp_rank=rank // sp, dp_size=world_size // sp)


class _SumOverGroup(torch.autograd.Function):
    """All-reduce (sum) whose backward is the identity: every rank computes the same loss from the sum,
    so each rank's share gets that loss's gradient once (summing over ranks would count it k times)."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, group: dist.ProcessGroup) -> torch.Tensor:
        out = x.clone()
        dist.all_reduce(out, group=group)
        return out

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        return grad, None


def check_sp_family(model: PreTrainedModel) -> None:
    """Refuse families whose layers cannot be split over the sequence by heads (see `SP_FAMILIES`)."""
    kind = getattr(model.config, "model_type", "?")
    if kind not in SP_FAMILIES:
        raise ValueError(
            f"sequence_parallel is not supported for {kind}: its gated-delta-net (linear attention) layers carry "
            f"a recurrent state along the whole sequence, which cannot be split by heads; "
            f"supported: {sorted(SP_FAMILIES)}")


class _Shard:
    """A forward pre-hook on the language model: cut its full-sequence inputs to this rank's slice."""

    def __init__(self, state: UlyssesState, start: int, chunk: int):
        self.state, self.start, self.chunk = state, start, chunk

    def _seq(self, t: torch.Tensor, dim: int) -> torch.Tensor:
        """This rank's `chunk` positions along `dim`, zero-padded where the slice runs past the sequence."""
        length = t.shape[dim]
        stop = self.start + self.chunk
        if stop > length:
            pad_shape = list(t.shape)
            pad_shape[dim] = stop - length
            t = torch.cat([t, t.new_zeros(pad_shape)], dim=dim)
        return t.narrow(dim, self.start, self.chunk)

    def __call__(self, module: torch.nn.Module, args: tuple, kwargs: dict[str, Any]):
        if args or kwargs.get("inputs_embeds") is None or kwargs.get("position_ids") is None:
            raise RuntimeError("sequence parallel: expected the language model to be called with inputs_embeds "
                               "and position_ids by keyword (transformers' Qwen-VL models)")
        out = dict(kwargs)
        out["inputs_embeds"] = self._seq(kwargs["inputs_embeds"], 1)
        out["position_ids"] = self._seq(kwargs["position_ids"], -1)
        out["attention_mask"] = None  # the full mask travels in the state
        visual = kwargs.get("visual_pos_masks")
        if visual is not None:  # Qwen3-VL deepstack: keep the features of this slice's vision tokens
            local = self._seq(visual, 1)
            mine = torch.zeros_like(visual)
            mine[:, self.start:self.start + local.shape[1]] = True
            keep = mine[visual]  # over the vision tokens in row-major order, as the features are stored
            out["visual_pos_masks"] = local
            out["deepstack_visual_embeds"] = [e[keep] for e in kwargs["deepstack_visual_embeds"]]
        out["ulysses"] = self.state
        return (), out


def _text_model(model: PreTrainedModel) -> torch.nn.Module:
    inner = getattr(model, "model", None)
    lm = getattr(inner, "language_model", None)
    if lm is None:
        raise TypeError(f"{type(model).__name__}: not a Qwen-VL model (no .model.language_model)")
    return lm


def sp_response_log_probs(
    model: PreTrainedModel, batch: ModelBatch, group: dist.ProcessGroup | None, *, temperature: float = 1.0,
    with_entropy: bool = False, chunk_tokens: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """`runtime.response_log_probs` with the sequence split over the ranks of `group`.

    Every rank of the group passes the same `batch` (prepared on its device) and gets the same
    [B, Lr] log-probs (and entropy), 0 outside `response_mask`. Gradients: when every rank computes
    the same loss from the result and calls `.backward()`, the parameter gradients summed over the
    group's ranks equal that loss's gradient without sequence parallelism. `group=None` or a group of
    one rank is the plain path. Collective: all ranks of the group must call it together.
    `chunk_tokens`: each rank applies the output head to its own slice's response positions that many
    at a time (`runtime.chunked_token_log_probs`); None: full logits of the slice.
    """
    k = 1 if group is None else dist.get_world_size(group)
    if k == 1:
        return response_log_probs(model, batch, temperature=temperature, with_entropy=with_entropy,
                                  chunk_tokens=chunk_tokens)
    check_temperature(temperature)
    check_sp_family(model)
    b, lr = batch.response_mask.shape
    if lr == 0:
        empty = batch.input_ids.new_zeros((b, 0), dtype=torch.float32)
        return empty, (empty.clone() if with_entropy else None)
    lm = _text_model(model)
    enable_ulysses(lm.config)
    length = batch.input_ids.shape[1]
    chunk = -(-length // k)
    start = dist.get_rank(group) * chunk
    valid = batch.attention_mask.bool()
    key_valid = None if bool(valid.all()) else torch.cat([valid, valid.new_zeros((b, chunk * k - length))], 1)
    state = UlyssesState(group=group, size=k, key_valid=key_valid)
    # global columns predicting response tokens: Lp - 1 + j predicts response token j
    first = batch.prompt_length - 1
    lo = max(start, first)
    cols = torch.arange(lo, max(lo, min(start + chunk, first + lr)), device=batch.input_ids.device)
    hook = lm.register_forward_pre_hook(_Shard(state, start, chunk), with_kwargs=True)
    j = cols - first
    try:
        if chunk_tokens is None:
            logits = model(**batch.model_inputs(), logits_to_keep=cols - start, use_cache=False).logits
        else:
            with hidden_instead_of_logits(model) as head:
                hidden = model(**batch.model_inputs(), logits_to_keep=cols - start, use_cache=False).logits
    finally:
        hook.remove()
    if chunk_tokens is None:
        lp, ent = token_log_probs(logits, batch.response_ids[:, j], batch.response_mask[:, j], temperature, with_entropy)
    else:  # the head read after the forward (FSDP2 keeps the root unit gathered until the backward)
        lp, ent = chunked_token_log_probs(hidden, head.weight, batch.response_ids[:, j], batch.response_mask[:, j],
                                          temperature, with_entropy, bias=head.bias, chunk_tokens=chunk_tokens)
    zeros = torch.zeros((b, lr), dtype=torch.float32, device=lp.device)
    log_probs = _SumOverGroup.apply(zeros.index_copy(1, j, lp), group)
    entropy = _SumOverGroup.apply(zeros.index_copy(1, j, ent), group) if with_entropy else None
    return log_probs, entropy
