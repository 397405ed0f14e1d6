"""Building a sharded model with one copy of the checkpoint per node, not one per rank, and never a
full copy on an accelerator.

Rank 0 reads the checkpoint into host memory (CPU). Every rank, rank 0 included, builds the
architecture on the meta device (no memory), shards it, allocates only its shard on its device, and
receives its part of the weights by broadcast from rank 0's host copy, one tensor at a time
(`set_model_state_dict(..., broadcast_from_rank0=True)` moves each tensor to the device, broadcasts
it and keeps this rank's slice): a rank's device holds its shard plus at most one full tensor (the
largest, the embedding or output head: 2.5 GB in fp32 for a 151,936 × 4,096 vocabulary), where rank 0
used to build the whole model on its device (35 GB in fp32 for 8B). Buffers outside the state dict
(rotary frequencies) are broadcast too, so all ranks hold exactly rank 0's values.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import evr1.models.lean_import  # noqa: F401,I001  (first: transformers then skips scikit-learn)
import torch
import torch.distributed as dist
from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
from transformers import AutoConfig, AutoModelForImageTextToText

from evr1.models import load_model
from evr1.models.vision_attention import use_varlen_vision_attention


def build_sharded(model_dir: str | Path, *, rank: int, dtype: torch.dtype, attn_implementation: str, device: str,
                  shard: Callable[[torch.nn.Module], None],
                  prepare: Callable[[torch.nn.Module], None] = lambda m: None) -> torch.nn.Module:
    """The model at `model_dir` in `dtype`, sharded by `shard`, its weights read from disk on rank 0 only,
    into host memory, and sent to every rank's device tensor by tensor (module docstring).

    `prepare` runs before sharding on every rank (train mode, gradient checkpointing, freezing).
    """
    full, buffers = {}, {}
    if rank == 0:
        host = load_model(model_dir, dtype=dtype, attn_implementation=attn_implementation)  # on the CPU
        full = dict(host.state_dict())
        buffers = {name: b.detach() for name, b in host.named_buffers()}
        del host
    config = AutoConfig.from_pretrained(str(model_dir))
    with torch.device("meta"):
        model = AutoModelForImageTextToText.from_config(config, dtype=dtype, attn_implementation=attn_implementation)
    use_varlen_vision_attention(model)  # as `load_model` does: the tower's windows in one call
    prepare(model)
    shard(model)
    model.to_empty(device=device)
    set_model_state_dict(model, full, options=StateDictOptions(full_state_dict=True, broadcast_from_rank0=True))
    del full
    with torch.no_grad():
        for name, buf in model.named_buffers():
            if rank == 0:
                buf.copy_(buffers[name])
            dist.broadcast(buf, src=0)
    return model


def build_replicated(model_dir: str | Path, *, rank: int, dtype: torch.dtype, attn_implementation: str, device: str,
                     shard: Callable[[torch.nn.Module], None],
                     prepare: Callable[[torch.nn.Module], None] = lambda m: None) -> torch.nn.Module:
    """The previous way, kept for comparison (`meta_init: false`): every rank reads the whole
    checkpoint, then shards it; host memory peaks at one full copy per rank."""
    model = load_model(model_dir, dtype=dtype, attn_implementation=attn_implementation).to(device)
    prepare(model)
    shard(model)
    return model


def shard_model(model: torch.nn.Module, mesh, policy: MixedPrecisionPolicy | None = None) -> None:
    """Shard each language-model block (the classes HF marks as not to be split), then the root.

    The vision tower stays in the root unit on purpose: the model calls it once for images and
    once more for videos, so ranks whose micro-batches mix modalities differently would issue
    different numbers of all-gathers if its blocks were units of their own (a collective
    mismatch). In the root unit it is gathered once per forward, whatever the media.
    """
    block_names = {name for name in (getattr(model, "_no_split_modules", None) or []) if "Vision" not in name}
    options = {"mesh": mesh, **({"mp_policy": policy} if policy is not None else {})}
    for module in model.modules():
        if type(module).__name__ in block_names:
            fully_shard(module, **options)
    fully_shard(model, **options)
