"""Loading a checkpoint and the differentiable response log-probabilities the trainer optimises."""

from __future__ import annotations

from os import PathLike

import torch
from transformers import AutoModelForImageTextToText, PreTrainedModel

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


def load_model(
    model_dir: str | PathLike, *, dtype: torch.dtype | str = torch.float32, attn_implementation: str = "sdpa"
) -> PreTrainedModel:
    """The checkpoint as `AutoModelForImageTextToText`, in eval mode."""
    model = AutoModelForImageTextToText.from_pretrained(
        str(model_dir), dtype=as_dtype(dtype), attn_implementation=attn_implementation
    )
    return model.eval()


def response_log_probs(
    model: PreTrainedModel, batch: ModelBatch, *, temperature: float = 1.0, with_entropy: bool = False
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Log-probabilities [B, Lr] of the response tokens under `model` (logits / temperature).

    One forward over prompt + response; only the Lr positions that predict response tokens get
    logits (`logits_to_keep`), and the log-softmax is taken as gather − logsumexp so no
    [B, Lr, V] log-prob tensor is kept. Positions outside `response_mask` are 0.
    """
    check_temperature(temperature)
    lr = batch.response_mask.shape[1]
    b = batch.input_ids.shape[0]
    if lr == 0:
        empty = batch.input_ids.new_zeros((b, 0), dtype=torch.float32)
        return empty, (empty.clone() if with_entropy else None)
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
