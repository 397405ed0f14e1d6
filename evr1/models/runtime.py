"""Loading a checkpoint and the differentiable response log-probabilities the trainer optimises."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from os import PathLike

import torch
from transformers import AutoModelForImageTextToText, PreTrainedModel

from evr1.models.vision_attention import use_varlen_vision_attention
from evr1.models.adapter import ModelBatch


def as_dtype(dtype: torch.dtype | str) -> torch.dtype:
    """`torch.bfloat16` or its config spelling (`"bfloat16"`, `"bf16"`, `"torch.bfloat16"`)."""
    if isinstance(dtype, torch.dtype):
        return dtype
    name = str(dtype).removeprefix("torch.")
    name = {"bf16": "bfloat16", "fp16": "float16", "half": "float16", "fp32": "float32", "float": "float32"}.get(name, name)
    value = getattr(torch, name, None)
    if not isinstance(value, torch.dtype):
        raise ValueError(f"unknown dtype {dtype!r}")
    return value


AUTO_DTYPE = "auto"


def resolve_dtype(dtype: torch.dtype | str | None, device: str | torch.device | None) -> str:
    """The dtype a model is loaded in for inference on `device` (evaluation, rollout engines): an explicit
    dtype as it is; "auto" (or None): bfloat16 on CUDA (vLLM's flash backends serve no float32, and it
    halves the weights), float32 on the CPU (no fast bf16 path there, and the CPU tests' exact figures).
    `device` None: CUDA when this process sees a GPU."""
    if dtype is not None and str(dtype) != AUTO_DTYPE:
        return str(as_dtype(dtype)).removeprefix("torch.")
    if device is None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
    return "bfloat16" if torch.device(device).type == "cuda" else "float32"


def configured_dtype(model_config: object, device: str | torch.device | None) -> str:
    """`model.dtype` resolved for an inference load on `device` (`resolve_dtype`): the config's value
    when the config sets it, else "auto" (bf16 on CUDA, fp32 on the CPU). `model_config` is the
    `model` section (pydantic: an unset key is not in its `model_fields_set`)."""
    dtype = getattr(model_config, "dtype", None)
    explicit = "dtype" in getattr(model_config, "model_fields_set", {"dtype"})
    return resolve_dtype(dtype if explicit else AUTO_DTYPE, device)


def load_model(
    model_dir: str | PathLike, *, dtype: torch.dtype | str = torch.float32, attn_implementation: str = "sdpa"
) -> PreTrainedModel:
    """The checkpoint as `AutoModelForImageTextToText`, in eval mode; under sdpa, its vision tower
    attends to all its windows in one call (`vision_attention.use_varlen_vision_attention`)."""
    model = AutoModelForImageTextToText.from_pretrained(
        str(model_dir), dtype=as_dtype(dtype), attn_implementation=attn_implementation
    )
    use_varlen_vision_attention(model)
    return model.eval()


def response_log_probs(
    model: PreTrainedModel, batch: ModelBatch, *, temperature: float = 1.0, with_entropy: bool = False,
    chunk_tokens: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Log-probabilities [B, Lr] of the response tokens under `model` (logits / temperature).

    One forward over prompt + response; only the Lr positions that predict response tokens get
    logits (`logits_to_keep`), and the log-softmax is taken as gather − logsumexp so no
    [B, Lr, V] log-prob tensor is kept. Positions outside `response_mask` are 0.
    `chunk_tokens`: the model returns final hidden states instead of logits and
    `chunked_token_log_probs` applies the output head `chunk_tokens` valid response tokens at a time,
    so no [B, Lr, V] logits exist at all (None: today's full-logits path).
    """
    check_temperature(temperature)
    lr = batch.response_mask.shape[1]
    b = batch.input_ids.shape[0]
    if lr == 0:
        empty = batch.input_ids.new_zeros((b, 0), dtype=torch.float32)
        return empty, (empty.clone() if with_entropy else None)
    if chunk_tokens is not None:
        with hidden_instead_of_logits(model) as head:
            hidden = model(**batch.model_inputs(), logits_to_keep=lr + 1, use_cache=False).logits
        return chunked_token_log_probs(hidden[:, :-1, :], head.weight, batch.response_ids, batch.response_mask,
                                       temperature, with_entropy, bias=head.bias, chunk_tokens=chunk_tokens,
                                       index=batch.response_index)
    out = model(**batch.model_inputs(), logits_to_keep=lr + 1, use_cache=False)
    # position t predicts token t + 1
    return token_log_probs(out.logits[:, :-1, :], batch.response_ids, batch.response_mask, temperature, with_entropy)


def token_log_probs(
    logits: torch.Tensor, targets: torch.Tensor, mask: torch.Tensor, temperature: float, with_entropy: bool
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """log softmax(logits / T) at `targets` as gather − logsumexp (no [B, L, V] log-prob tensor), 0 off `mask`;
    shared by `response_log_probs` and the shared-prefix passes, so the two paths agree to rounding."""
    logits = logits.float() / temperature
    log_z = torch.logsumexp(logits, dim=-1)
    log_probs = logits.gather(-1, targets.unsqueeze(-1)).squeeze(-1) - log_z
    mask = mask.bool()
    log_probs = torch.where(mask, log_probs, torch.zeros_like(log_probs))
    entropy = None
    if with_entropy:
        entropy = log_z - (torch.softmax(logits, dim=-1) * logits).sum(-1)
        entropy = torch.where(mask, entropy, torch.zeros_like(entropy))
    return log_probs, entropy


# Valid response tokens per logits chunk: a [chunk, V] fp32 block is 4·chunk·V bytes (2.5 GB at 4096 × 151,936),
# and about two such blocks are alive at once, forward or backward.
DEFAULT_CHUNK_TOKENS = 2048
# Config fields that transform logits after the output head (the chunked path would skip them).
_LOGIT_TRANSFORMS = ("final_logit_softcapping", "logit_scale", "logits_scaling", "output_multiplier_scale")


@contextmanager
def hidden_instead_of_logits(model: torch.nn.Module) -> Iterator[torch.nn.Linear]:
    """Within the block, `model(...)` returns the final (normed) hidden states [B, K, H] in `.logits`
    at the positions `logits_to_keep` selects: the output head is bypassed and yielded, so
    `chunked_token_log_probs(hidden, head.weight, …, bias=head.bias)` applies it per chunk.

    The head stays a parameter of the model: under FSDP2 it belongs to the root unit, unsharded
    through the forward and the backward (a head wrapped in its own `fully_shard` unit would be
    resharded after its bypassed forward: do not wrap it). Models whose config transforms logits
    after the head (softcapping, scaling) are refused."""
    head = model.get_output_embeddings()
    if not isinstance(head, torch.nn.Linear):
        raise TypeError(f"hidden_instead_of_logits: the output head is {type(head).__name__}, not nn.Linear")
    configs = [model.config, *([model.config.get_text_config()] if hasattr(model.config, "get_text_config") else [])]
    for cfg in configs:
        for key in _LOGIT_TRANSFORMS:
            value = getattr(cfg, key, None)
            if value not in (None, 1, 1.0):
                raise ValueError(f"hidden_instead_of_logits: {key}={value} transforms logits after the head")
    before = head.__dict__.get("forward")
    head.forward = _identity  # an instance attribute: the module's hooks still run, its matmul does not
    try:
        yield head
    finally:
        if before is None:
            del head.forward
        else:
            head.forward = before


def _identity(x: torch.Tensor) -> torch.Tensor:
    # The model slices the kept positions out of its hidden states (a view for an int `logits_to_keep`):
    # FSDP2 hooks the root's outputs for its backward and warns about (and is unsafe with) a view, so
    # a view is copied — [B, K, H], H/V of the logits it replaces (2.7 % at Qwen's 4,096 / 151,936).
    return x.clone() if x._base is not None else x


def valid_index(mask: torch.Tensor) -> torch.Tensor:
    """The flat positions of `mask`'s valid tokens, [N] int64. `nonzero` sizes its output from the
    values, so on an accelerator it makes the host wait for the device: made from the host's mask
    before the move (`ModelBatch.response_index`), it costs no wait."""
    return mask.reshape(-1).bool().nonzero().squeeze(1)


def chunked_token_log_probs(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    targets: torch.Tensor,
    mask: torch.Tensor,
    temperature: float = 1.0,
    with_entropy: bool = False,
    *,
    bias: torch.Tensor | None = None,
    chunk_tokens: int = DEFAULT_CHUNK_TOKENS,
    index: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """`token_log_probs(F.linear(hidden, weight, bias), targets, mask, …)` without the [B, L, V] logits.

    hidden [B, L, H]: final hidden states at the positions predicting `targets` [B, L] (position t
    predicts token t + 1, as for `token_log_probs`); weight [V, H] (and bias [V]): the output head;
    mask [B, L]: the valid response tokens, the only positions computed (padding never gets logits).
    The valid positions are taken `chunk_tokens` at a time: logits in the head's dtype, then fp32 /
    temperature, log-prob = z[target] − logsumexp(z), entropy = −Σ p·log p with p = exp(z − logsumexp)
    (= logsumexp(z) − Σ softmax(z)·z), each chunk's fp32 blocks freed before the next. Differentiable in
    `hidden`, `weight` and `bias`: the backward recomputes each chunk's logits, so nothing [·, V] is
    saved between forward and backward. Returns fp32 [B, L] log-probs (and entropy), 0 off `mask`.
    `index`: `valid_index(mask)` when the caller has it already (made on the host: no device wait).
    """
    check_temperature(temperature)
    if chunk_tokens < 1:
        raise ValueError(f"chunk_tokens must be >= 1, got {chunk_tokens}")
    b, length = targets.shape
    if hidden.shape[:2] != (b, length) or mask.shape != (b, length):
        raise ValueError(f"hidden {tuple(hidden.shape)}, targets {tuple(targets.shape)} and mask {tuple(mask.shape)} "
                         "must agree on [B, L]")
    index = valid_index(mask) if index is None else index
    rows = hidden.reshape(b * length, hidden.shape[-1]).index_select(0, index)
    lp, ent = _ChunkedLogProbs.apply(rows, weight, bias, targets.reshape(-1).index_select(0, index),
                                     float(temperature), int(chunk_tokens), bool(with_entropy))
    zeros = torch.zeros(b * length, dtype=torch.float32, device=hidden.device)
    log_probs = zeros.index_copy(0, index, lp).view(b, length)
    entropy = zeros.index_copy(0, index, ent).view(b, length) if with_entropy else None
    return log_probs, entropy


def _chunk_log_probs(rows, weight, bias, temperature):
    """log softmax(rows @ weightᵀ + bias) / T of one chunk as an fp32 [c, V] tensor (one allocation of
    that size beyond the head's output), and its logsumexp [c]."""
    z = torch.nn.functional.linear(rows, weight, bias).float()
    if temperature != 1.0:
        z.div_(temperature)
    lse = torch.logsumexp(z, dim=-1)
    return z.sub_(lse.unsqueeze(1)), lse


class _ChunkedLogProbs(torch.autograd.Function):
    """rows [N, H] → (log-probs [N], entropy [N]) chunk by chunk; the backward recomputes each chunk."""

    @staticmethod
    def forward(ctx, rows, weight, bias, targets, temperature, chunk, with_entropy):
        n = rows.shape[0]
        lp = torch.empty(n, dtype=torch.float32, device=rows.device)
        ent = torch.zeros(n, dtype=torch.float32, device=rows.device)
        with torch.no_grad():
            for start in range(0, n, chunk):
                end = min(start + chunk, n)
                logp, _ = _chunk_log_probs(rows[start:end], weight, bias, temperature)
                lp[start:end] = logp.gather(1, targets[start:end].unsqueeze(1)).squeeze(1)
                if with_entropy:
                    ent[start:end] = -(logp.exp().mul_(logp)).sum(-1)
                del logp
        ctx.save_for_backward(rows, weight, bias, targets, ent)
        ctx.temperature, ctx.chunk, ctx.with_entropy = temperature, chunk, with_entropy
        if not with_entropy:
            ctx.mark_non_differentiable(ent)
        return lp, ent

    @staticmethod
    def backward(ctx, grad_lp, grad_ent):
        rows, weight, bias, targets, ent = ctx.saved_tensors
        need_rows, need_weight, need_bias = ctx.needs_input_grad[:3]
        grad_rows = torch.empty_like(rows) if need_rows else None
        grad_weight = torch.zeros_like(weight) if need_weight else None
        grad_bias = torch.zeros_like(bias) if need_bias and bias is not None else None
        t = ctx.temperature
        for start in range(0, rows.shape[0], ctx.chunk):
            end = min(start + ctx.chunk, rows.shape[0])
            with torch.no_grad():
                logp, _ = _chunk_log_probs(rows[start:end], weight, bias, t)
                p = logp.exp()
                # d lp / d z = onehot(target) − p;  d H / d z = −p · (log p + H). In place: two [c, V] blocks.
                if ctx.with_entropy and grad_ent is not None:
                    entropy_term = logp.add_(ent[start:end].unsqueeze(1)).mul_(p).mul_(-grad_ent[start:end].unsqueeze(1))
                else:
                    entropy_term = None
                del logp
                g_lp = grad_lp[start:end].unsqueeze(1) if grad_lp is not None else None
                grad_z = p.mul_(-g_lp) if g_lp is not None else p.zero_()
                if entropy_term is not None:
                    grad_z.add_(entropy_term)
                del entropy_term, p
                if g_lp is not None:
                    grad_z.scatter_add_(1, targets[start:end].unsqueeze(1), g_lp)
                if t != 1.0:
                    grad_z.div_(t)
                grad_logits = grad_z.to(weight.dtype)
                del grad_z
                if need_rows:
                    grad_rows[start:end] = grad_logits @ weight
                if grad_weight is not None:
                    grad_weight.addmm_(grad_logits.t(), rows[start:end].to(weight.dtype))
                if grad_bias is not None:
                    grad_bias.add_(grad_logits.sum(0).to(bias.dtype))
        return grad_rows, grad_weight, grad_bias, None, None, None, None


def check_temperature(temperature: float) -> None:
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0 for log-probs, got {temperature}")


class VisionPassCounter:
    """Counts the media items (images or videos) a model's vision tower encodes: one per row of the
    `grid_thw` it is called with. Measures how often a prompt's frames go through the encoder."""

    def __init__(self, model: torch.nn.Module):
        self.count = 0
        visual = getattr(getattr(model, "model", None), "visual", None)
        if visual is not None:
            visual.register_forward_pre_hook(self._hook, with_kwargs=True)

    def _hook(self, module, args, kwargs) -> None:
        grid = kwargs.get("grid_thw", args[1] if len(args) > 1 else None)
        self.count += int(grid.shape[0]) if torch.is_tensor(grid) else 1

    def take(self) -> int:
        out, self.count = self.count, 0
        return out
