"""Vision features once per prompt, and a group's n responses scored on one shared prompt prefix.

GRPO scores n responses per prompt, and at real video sizes the prompt (about 95 % vision tokens)
is almost all of each sequence. `runtime.response_log_probs` over `collate([prompt] * n, ...)` runs
the vision tower n times and the long prompt through the decoder n times per pass. Here:

- `encode_visual` runs the vision tower once for a batch's media, through the model's own
  `get_image_features` / `get_video_features` (so Qwen3-VL's deepstack features come along), and
  `response_log_probs_with_visual` feeds them back through the model's `mm_encoder_outputs`
  argument: the model itself embeds the tokens, scatters the features at the placeholders, adds
  deepstack and computes the multimodal rope positions, exactly as on the pixel path.
- `grouped_response_log_probs` runs the prompt ONCE with `use_cache=True` (batch 1, no padding) and
  its n responses as one batch of n on top of that prompt's key/value cache, repeated n times
  (and, for Qwen3.5, its linear-attention conv/recurrent states likewise).
  The cache tensors stay in the autograd graph, so a loss on the result sends gradients back into
  the shared prefix (and the vision tower) summed over the group, as the unshared path does.

Why a KV cache rather than one packed [prompt, r1..rn] sequence with a 4-D block mask: the cache
path is exact for every family, including Qwen3.5's gated-delta-net layers, which take no attention
mask and so cannot be packed; it keeps sdpa's ordinary causal kernels (fast on CPU and GPU, no
materialised (Lp + n·Lr)² mask); and it uses only the model's public forward. Responses are
right-padded, so under causal attention a real token never sees padding; response positions
continue the prompt's: `Lp + j + rope_delta` on all three mrope axes, as `get_rope_index` gives.

Semantics equal `response_log_probs(model, adapter.collate([prompt] * n, responses))`: [n, Lr]
log-probs of logits / temperature, 0 outside each response (and on vision token ids a response may
hold, which collate masks), optional entropy likewise.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch
from transformers import PreTrainedModel

from evr1.models.adapter import VisionLanguageAdapter
from evr1.models.batch import ModelBatch, PromptInputs, to_device
from evr1.models.positions import ROPE_KEYS, with_host_positions
from evr1.models.runtime import (
    check_temperature,
    chunked_token_log_probs,
    hidden_instead_of_logits,
    token_log_probs,
    valid_index,
)

PIXEL_KEYS = ("pixel_values", "pixel_values_videos")
GRID_KEYS = ROPE_KEYS  # the grids `get_rope_index` reads
# media key → (feature getter on the inner model, pixel key, grid key)
MEDIA = {
    "image": ("get_image_features", "pixel_values", "image_grid_thw"),
    "video": ("get_video_features", "pixel_values_videos", "video_grid_thw"),
}


@dataclass
class VisualFeatures:
    """A batch's vision-tower outputs per modality, in the form the model's `mm_encoder_outputs` takes:
    `pooler_output` is a tuple with one [tokens, hidden] tensor per image / video (in batch order),
    and on Qwen3-VL `deepstack_features` a list over deepstack layers of such tuples."""

    outputs: dict[str, Any]

    def repeat(self, n: int) -> VisualFeatures:
        """The features of a batch in which this batch's prompts appear n times in a row
        (`collate([prompt] * n)` for one prompt). Shares storage: gradients from all n copies sum."""
        return VisualFeatures({k: _tile(v, n) for k, v in self.outputs.items()})

    def detach(self) -> VisualFeatures:
        """Features cut from the graph: for passes that need no gradient into the vision tower."""
        return VisualFeatures({k: _map_tensors(v, torch.Tensor.detach) for k, v in self.outputs.items()})

    def to(self, device: torch.device | str, *, non_blocking: bool = False) -> VisualFeatures:
        """The features on `device`. `non_blocking` from an accelerator to the host: copies queued
        behind the device's work into pinned memory, readable after a stream sync."""
        return VisualFeatures({k: _map_tensors(v, lambda t: t.to(device, non_blocking=non_blocking))
                               for k, v in self.outputs.items()})

    @classmethod
    def concat(cls, parts: Sequence[VisualFeatures]) -> VisualFeatures:
        """The features of a batch made of these parts' prompts, in order (per modality, as `collate`
        concatenates the media)."""
        outputs: dict[str, Any] = {}
        for kind in MEDIA:
            have = [p.outputs[kind] for p in parts if kind in p.outputs]
            if not have:
                continue
            fields = {"pooler_output": tuple(t for out in have for t in out.pooler_output)}
            if getattr(have[0], "deepstack_features", None) is not None:
                fields["deepstack_features"] = [tuple(t for out in have for t in out.deepstack_features[layer])
                                                for layer in range(len(have[0].deepstack_features))]
            outputs[kind] = type(have[0])(**fields)
        return cls(outputs)

    def split(self, counts: Sequence[Mapping[str, int]]) -> list[VisualFeatures]:
        """The inverse of `concat`: this batch's features cut into consecutive parts holding
        `counts[i][kind]` images / videos each (`media_counts` of each prompt, in batch order)."""
        starts = dict.fromkeys(MEDIA, 0)
        parts = []
        for count in counts:
            outputs = {}
            for kind, out in self.outputs.items():
                k = count.get(kind, 0)
                if k:
                    a, b = starts[kind], starts[kind] + k
                    outputs[kind] = _slice(out, a, b)
                    starts[kind] = b
            parts.append(VisualFeatures(outputs))
        left = {kind: len(out.pooler_output) - starts[kind] for kind, out in self.outputs.items()}
        if any(left.values()):
            raise ValueError(f"VisualFeatures.split: {left} media left over after {len(counts)} parts")
        return parts

    @property
    def dtype(self) -> torch.dtype | None:
        """The features' dtype (None when there are none)."""
        for out in self.outputs.values():
            return out.pooler_output[0].dtype
        return None

    def __len__(self) -> int:
        return sum(len(v.pooler_output) for v in self.outputs.values())


def media_counts(prompt: PromptInputs) -> dict[str, int]:
    """How many images and videos a prompt holds (one `grid_thw` row each): its share of a batch's
    `VisualFeatures`, for `VisualFeatures.split`."""
    out = {}
    for kind, (_, _, grid_key) in MEDIA.items():
        grid = prompt.mm.get(grid_key)
        if grid is not None and grid.shape[0]:
            out[kind] = int(grid.shape[0])
    return out


def _map_tensors(out: Any, fn) -> Any:
    fields = {"pooler_output": tuple(fn(t) for t in out.pooler_output)}
    if getattr(out, "deepstack_features", None) is not None:
        fields["deepstack_features"] = [tuple(fn(t) for t in layer) for layer in out.deepstack_features]
    return type(out)(**fields)


def _slice(out: Any, start: int, stop: int) -> Any:
    fields = {"pooler_output": tuple(out.pooler_output[start:stop])}
    if getattr(out, "deepstack_features", None) is not None:
        fields["deepstack_features"] = [tuple(layer[start:stop]) for layer in out.deepstack_features]
    return type(out)(**fields)


def _tile(out: Any, n: int) -> Any:
    fields = {"pooler_output": tuple(out.pooler_output) * n}
    if getattr(out, "deepstack_features", None) is not None:
        fields["deepstack_features"] = [tuple(layer) * n for layer in out.deepstack_features]
    return type(out)(**fields)


def _inner(model: PreTrainedModel) -> torch.nn.Module:
    """The `XxxModel` holding `visual` and `language_model` (`model.model` for every Qwen-VL class)."""
    inner = getattr(model, "model", None)
    if inner is None or not hasattr(inner, "get_rope_index"):
        raise TypeError(f"{type(model).__name__}: not a Qwen-VL conditional-generation model (no .model.get_rope_index)")
    return inner


def encode_visual(model: PreTrainedModel, mm: Mapping[str, torch.Tensor] | ModelBatch) -> VisualFeatures:
    """Run the vision tower once over the media of `mm` (a prepared `ModelBatch` or its `mm` dict):
    one call per modality present, through the model's own feature getters. Gradients flow into the
    tower when grad is enabled. Text-only input gives empty features (no tower call)."""
    if isinstance(mm, ModelBatch):
        if mm.pending_images or mm.pending_videos:
            raise ValueError("encode_visual: media are still uint8 frames; call batch.to(device, dtype) first")
        mm = mm.mm
    inner = _inner(model)
    outputs = {}
    for kind, (getter, pixel_key, grid_key) in MEDIA.items():
        if pixel_key in mm:
            outputs[kind] = getattr(inner, getter)(mm[pixel_key], mm[grid_key], return_dict=True)
    return VisualFeatures(outputs)


def _model_inputs(batch: ModelBatch, visual: VisualFeatures | None) -> dict[str, Any]:
    """`batch.model_inputs()`, with the pixels replaced by precomputed features when given."""
    if visual is None:
        return batch.model_inputs()
    inputs = {k: v for k, v in batch.mm.items() if k not in PIXEL_KEYS}
    inputs.update(input_ids=batch.input_ids, attention_mask=batch.attention_mask,
                  mm_token_type_ids=batch.mm_token_type_ids)
    if batch.position_ids is not None:
        inputs["position_ids"] = batch.position_ids
    if visual.outputs:
        inputs["mm_encoder_outputs"] = dict(visual.outputs)
    return inputs


def response_log_probs_with_visual(
    model: PreTrainedModel, batch: ModelBatch, visual: VisualFeatures, *, temperature: float = 1.0,
    with_entropy: bool = False, chunk_tokens: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """`runtime.response_log_probs` with the vision tower replaced by precomputed `visual` features
    (one entry per image / video of `batch`, in batch order: `encode_visual(...).repeat(n)` for a
    prompt repeated n times). Same [B, Lr] result; the tower is not called. `chunk_tokens`: as for
    `response_log_probs` (the head applied per chunk of valid response tokens; None: full logits)."""
    check_temperature(temperature)
    lr, b = batch.response_mask.shape[1], batch.input_ids.shape[0]
    if lr == 0:
        empty = batch.input_ids.new_zeros((b, 0), dtype=torch.float32)
        return empty, (empty.clone() if with_entropy else None)
    if chunk_tokens is not None:
        with hidden_instead_of_logits(model) as head:
            hidden = model(**_model_inputs(batch, visual), logits_to_keep=lr + 1, use_cache=False).logits
        return chunked_token_log_probs(hidden[:, :-1, :], head.weight, batch.response_ids, batch.response_mask,
                                       temperature, with_entropy, bias=head.bias, chunk_tokens=chunk_tokens,
                                       index=batch.response_index)
    out = model(**_model_inputs(batch, visual), logits_to_keep=lr + 1, use_cache=False)
    return token_log_probs(out.logits[:, :-1, :], batch.response_ids, batch.response_mask, temperature, with_entropy)


def pad_responses(
    adapter: VisionLanguageAdapter, responses: Sequence[Sequence[int]], device: torch.device | str
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Right-padded response ids [n, Lr], attention [n, Lr] and response mask [n, Lr], by `collate`'s
    rule: vision token ids inside a response become the pad id and are masked out of the loss; and the
    mask's flat valid positions (`runtime.valid_index`), made here on the host."""
    n, lr = len(responses), max((len(r) for r in responses), default=0)
    ids = torch.full((n, lr), adapter.pad_token_id, dtype=torch.long)
    attention = torch.zeros((n, lr), dtype=torch.long)
    mask = torch.zeros((n, lr), dtype=torch.long)
    vision = torch.tensor(adapter.vision_token_ids)
    for i, r in enumerate(responses):
        if len(r):
            resp = torch.as_tensor(list(r), dtype=torch.long)
            ok = ~torch.isin(resp, vision)
            ids[i, : len(r)] = torch.where(ok, resp, adapter.pad_token_id)
            attention[i, : len(r)] = 1
            mask[i, : len(r)] = ok.long()
    # Staged in pinned memory on an accelerator: no host wait for the device's queued work (`to_device`).
    return tuple(to_device(t, device, non_blocking=True) for t in (ids, attention, mask, valid_index(mask)))


def _rope_delta(model: PreTrainedModel, prefix: ModelBatch) -> int | torch.Tensor:
    """How far the prompt's mrope positions run behind its length (0 for a text-only prompt, where
    the model's own positions are 0..Lp-1): response token j sits at Lp + j + delta on all axes.
    The host's figure (a 0-d tensor on the device: read by nobody) when it worked the positions out."""
    grids = {k: v for k, v in prefix.mm.items() if k in GRID_KEYS}
    if not grids:
        return 0
    if prefix.rope_deltas is not None:
        return prefix.rope_deltas.reshape(())
    _, delta = _inner(model).get_rope_index(
        prefix.input_ids, mm_token_type_ids=prefix.mm_token_type_ids, attention_mask=prefix.attention_mask, **grids
    )
    return int(delta.reshape(()).item())


def _repeat_cache(cache: Any, n: int) -> None:
    """Repeat a one-row cache n times along the batch, in place, keeping the graph (`repeat_interleave`,
    whose backward sums the n copies' gradients): attention keys and values, and the linear-attention
    conv and recurrent states of Qwen3.5, which `Cache.batch_repeat_interleave` leaves alone. Those
    layers then update their state functionally for the response pass: HF's in-place `copy_` would
    overwrite a tensor autograd saved for the backward."""
    for layer in cache.layers:
        if hasattr(layer, "keys") and getattr(layer, "is_initialized", False) and layer.keys is not None and layer.keys.numel():
            layer.keys = layer.keys.repeat_interleave(n, dim=0)
            layer.values = layer.values.repeat_interleave(n, dim=0)
        for name in ("conv_states", "recurrent_states"):
            states = getattr(layer, name, None)
            if isinstance(states, dict):  # state index → tensor (None until the layer is used)
                setattr(layer, name, {i: s.repeat_interleave(n, dim=0) if torch.is_tensor(s) else s
                                      for i, s in states.items()})
        if hasattr(layer, "update_recurrent_state"):
            layer.update_recurrent_state = _functional_recurrent_update(layer)
            layer.update_conv_state = _functional_conv_update(layer)


def _functional_recurrent_update(layer: Any):
    def update(recurrent_states: torch.Tensor, state_idx: int = 0, **kwargs) -> torch.Tensor:
        layer.recurrent_states[state_idx] = recurrent_states
        return recurrent_states
    return update


def _functional_conv_update(layer: Any):
    def update(conv_states: torch.Tensor, state_idx: int = 0, **kwargs) -> torch.Tensor:
        full = torch.cat([layer.conv_states[state_idx], conv_states], dim=-1)
        layer.conv_states[state_idx] = full[..., -layer.conv_kernel_size[state_idx]:]
        return full
    return update


@contextmanager
def _cache_kept(model: torch.nn.Module):
    """HF's gradient checkpointing drops `past_key_values` in training mode, which would silently cut
    the responses off their prompt. Without grad it buys nothing, so it is paused for the call; with
    grad the shared prefix cannot be exact, so it is refused."""
    layers = [m for m in model.modules() if getattr(m, "gradient_checkpointing", False) and m.training]
    if layers and torch.is_grad_enabled():
        raise ValueError("grouped_response_log_probs: gradient checkpointing drops the shared prompt's cache; "
                         "disable it (model.gradient_checkpointing_disable()) or score with response_log_probs")
    for m in layers:
        m.gradient_checkpointing = False
    try:
        yield
    finally:
        for m in layers:
            m.gradient_checkpointing = True


def _device_of(model: torch.nn.Module) -> torch.device:
    return next(model.parameters()).device


def grouped_response_log_probs(
    model: PreTrainedModel,
    adapter: VisionLanguageAdapter,
    prompt: PromptInputs,
    responses: Sequence[Sequence[int]],
    *,
    temperature: float = 1.0,
    with_entropy: bool = False,
    visual: VisualFeatures | None = None,
    dtype: torch.dtype | None = None,
    chunk_tokens: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Log-probs [n, Lr] (and entropy) of `responses` to one `prompt`, the prompt run once.

    Equal to `response_log_probs(model, adapter.collate([prompt] * n, responses))` within float
    rounding, differentiable into the prompt (and vision tower) when grad is enabled. `visual`:
    precomputed features of this prompt alone (`encode_visual` of `collate([prompt])`), used instead
    of running the tower. `dtype`: the pixel dtype when the prompt's media are prepared here
    (deferred prompts; e.g. bf16). `chunk_tokens`: the output head is applied that many valid
    response tokens at a time (`runtime.chunked_token_log_probs`: no [n, Lr, V] logits); None: full
    logits. Every call runs exactly two model forwards (prompt, then the n responses), even when
    every response is empty, so ranks stay in step under FSDP2.
    """
    check_temperature(temperature)
    if not responses:
        raise ValueError("grouped_response_log_probs: no responses for the prompt")
    device = _device_of(model)
    # Its rope positions worked out on the host, before the move (no device wait in `get_rope_index`).
    prefix = with_host_positions(model, adapter.collate([prompt]))
    # Given features, the prompt's pixels are never made (the tower would not see them).
    prefix = (prefix.with_visual(visual) if visual is not None else prefix).to(device, dtype, non_blocking=True)
    ids, attention, mask, index = pad_responses(adapter, responses, device)
    with _cache_kept(model):
        return _grouped(model, prefix, visual, ids, attention, mask, temperature, with_entropy, chunk_tokens, index)


def _grouped(model, prefix, visual, ids, attention, mask, temperature, with_entropy, chunk_tokens=None, index=None):
    """Two forwards, whatever the response lengths (FSDP2 ranks must issue the same collectives):
    the prompt with a cache, then the responses on the cache repeated n times. The response input is
    padded to at least two tokens, so no layer takes its single-token decode path (Qwen3.5's updates
    its conv state in place). With `chunk_tokens` both forwards return final hidden states (the head
    bypassed) and the head is applied per chunk of valid response tokens afterwards."""
    if chunk_tokens is None:
        logits = _grouped_forwards(model, prefix, visual, ids, attention)
        return token_log_probs(logits, ids, mask, temperature, with_entropy)
    with hidden_instead_of_logits(model) as head:
        hidden = _grouped_forwards(model, prefix, visual, ids, attention)
    # Read after the forwards: FSDP2 keeps the root unit (the head is in it) gathered until the backward.
    return chunked_token_log_probs(hidden, head.weight, ids, mask, temperature, with_entropy, bias=head.bias,
                                   chunk_tokens=chunk_tokens, index=index)


def _grouped_forwards(model, prefix, visual, ids, attention) -> torch.Tensor:
    """The two forwards of `_grouped`: the model's outputs [n, Lr, ·] (logits, or hidden states inside
    `hidden_instead_of_logits`) at the positions predicting each response token."""
    n, lr = ids.shape
    device = ids.device
    width = max(lr, 2)
    ids_in = torch.nn.functional.pad(ids, (0, width - lr), value=0)
    attention_in = torch.nn.functional.pad(attention, (0, width - lr), value=0)
    out = model(**_model_inputs(prefix, visual), use_cache=True, logits_to_keep=1)
    first = out.logits[:, -1:, :].expand(n, 1, -1)  # the last prompt position predicts every response's token 0
    cache = out.past_key_values
    _repeat_cache(cache, n)
    lp = prefix.input_ids.shape[1]
    positions = torch.arange(lp, lp + width, device=device) + _rope_delta(model, prefix)
    positions = positions.view(1, 1, width).expand(3, n, width)
    full_attention = torch.cat([prefix.attention_mask.expand(n, -1), attention_in], dim=1)
    rest = model(input_ids=ids_in, attention_mask=full_attention, position_ids=positions, past_key_values=cache,
                 use_cache=True, logits_to_keep=width)
    return torch.cat([first, rest.logits], dim=1)[:, :lr]  # response token j predicts token j + 1
