"""Weight sync into a running vLLM engine: in place, streamed in fixed-size buckets, caches reset after.

vLLM's own workers do the loading, through a worker extension (`LLM(worker_extension_cls=EXTENSION)`,
which `VLLMEngine.from_pretrained` always sets): its methods run inside every worker process and are
called by name with `collective_rpc`, so nothing but short strings crosses the client → engine core →
worker hops (msgpack, no `VLLM_ALLOW_INSECURE_SERIALIZATION`, any executor on one host, multiprocess
or not, any tensor-parallel size: each worker loads its own shard from the same file).

One sync:

1. `evr1_sync_begin` (every worker): `initialize_layerwise_reload(model)`, what vLLM's
   `reload_weights(..., is_checkpoint_format=True)` does first. Each layer goes back to its checkpoint
   form (a bare `load_weights` fails on the CPU's re-packed linears, and would skip quantisation or
   re-packing on GPU) and is processed again as soon as all its weights have arrived.
2. For each bucket: the client writes ≤ `bucket_bytes` of tensors, cast to the engine's dtype (bf16 for
   a bf16 engine: half of an fp32 trainer's bytes), as one safetensors file in `sync_dir` (/dev/shm by
   default: memory, not disk); `evr1_sync_load(path)` memory-maps it in every worker and feeds it to
   `model.load_weights` (checkpoint names, e.g. transformers' `model.language_model.*`, mapped by vLLM);
   the client deletes the file. So the client holds one bucket at a time, whatever the model's size.
3. `evr1_sync_end`: `finalize_layerwise_reload` (layers that got no weights keep theirs; attention
   layers are finalised), then the client resets the prefix cache (KV of earlier prompts) and the
   encoder cache (vision embeddings of media seen before, scheduler and workers). Without these two,
   prompts and media served before the sync come out as the old weights computed them.

A failure inside a sync still finalises (step 3) before it is raised, but the engine may then hold a
mix of old and new weights: rebuild it, or sync again.
"""

from __future__ import annotations

import os
import tempfile
import uuid
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

EXTENSION = "evr1.engines.vllm_sync.WeightSyncExtension"
DEFAULT_BUCKET_BYTES = 256 * 2**20


class WeightSyncExtension:
    """Mixed into vLLM's worker class; `self.model_runner` is the worker's model runner."""

    def evr1_sync_begin(self) -> None:
        from vllm.model_executor.model_loader.reload.layerwise import (
            initialize_layerwise_reload,
        )

        initialize_layerwise_reload(self.model_runner.get_model())

    def evr1_sync_load(self, path: str) -> int:
        from safetensors import safe_open

        with safe_open(path, framework="pt", device="cpu") as f:
            names = list(f.keys())
            order = (f.metadata() or {}).get("order")
            if order:  # the client's order (per-layer runs), not safetensors' sorted one
                names = order.split("\n")
            items = [(name, f.get_tensor(name)) for name in names]
        self.model_runner.get_model().load_weights(items)
        return len(items)

    def evr1_sync_end(self) -> None:
        from vllm.model_executor.model_loader.reload.layerwise import (
            finalize_layerwise_reload,
        )

        runner = self.model_runner
        finalize_layerwise_reload(runner.get_model(), runner.vllm_config.model_config)


@dataclass
class SyncReport:
    """What one `update_weights` moved."""

    tensors: int
    bytes: int
    buckets: int
    seconds: float

    def as_dict(self) -> dict[str, float]:
        return asdict(self)


def default_sync_dir() -> str:
    """EVR1_WEIGHT_SYNC_DIR, else /dev/shm when writable (shared memory, what vLLM's own IPC uses),
    else the temp directory."""
    if env := os.environ.get("EVR1_WEIGHT_SYNC_DIR"):
        return env
    shm = Path("/dev/shm")
    return str(shm) if shm.is_dir() and os.access(shm, os.W_OK) else tempfile.gettempdir()


def _items(weights: Mapping[str, Any] | Iterable[tuple[str, Any]]) -> Iterator[tuple[str, torch.Tensor]]:
    yield from (weights.items() if isinstance(weights, Mapping) else weights)


def _as_sent(tensor: torch.Tensor, dtype: torch.dtype | None) -> torch.Tensor:
    t = tensor.detach()
    if hasattr(t, "full_tensor"):  # a DTensor (FSDP2): the whole tensor
        t = t.full_tensor()
    if dtype is not None and t.is_floating_point():
        t = t.to(dtype)
    return t.to("cpu").contiguous()


def write_buckets(
    weights: Mapping[str, Any] | Iterable[tuple[str, Any]],
    directory: str | os.PathLike,
    *,
    dtype: torch.dtype | None,
    bucket_bytes: int = DEFAULT_BUCKET_BYTES,
    stats: dict[str, int] | None = None,
) -> Iterator[Path]:
    """Stream `weights` into safetensors files of about `bucket_bytes` each (one larger tensor goes
    alone), yielding each path once written; the caller loads and deletes it before asking for the
    next, so at most one bucket exists at a time. `stats` accumulates tensors and bytes."""
    from safetensors.torch import save_file

    if bucket_bytes < 1:
        raise ValueError(f"write_buckets: field bucket_bytes must be ≥ 1, got {bucket_bytes}")
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    stem = f"evr1-weights-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    bucket: dict[str, torch.Tensor] = {}
    size = 0
    index = 0
    stats = stats if stats is not None else {}

    def flush() -> Path:
        nonlocal bucket, size, index
        path = directory / f"{stem}-{index:05d}.safetensors"
        save_file(bucket, str(path), metadata={"order": "\n".join(bucket)})
        bucket, size, index = {}, 0, index + 1
        return path

    seen: set[str] = set()
    for name, tensor in _items(weights):
        if name in seen:
            raise ValueError(f"update_weights: tensor {name!r} given twice")
        seen.add(name)
        t = _as_sent(tensor, dtype)
        if any(t.untyped_storage().data_ptr() == b.untyped_storage().data_ptr() for b in bucket.values()):
            t = t.clone()  # tied weights share storage; safetensors refuses shared tensors in one file
        nbytes = t.numel() * t.element_size()
        if bucket and size + nbytes > bucket_bytes:
            yield flush()
        bucket[name] = t
        size += nbytes
        stats["tensors"] = stats.get("tensors", 0) + 1
        stats["bytes"] = stats.get("bytes", 0) + nbytes
    if bucket:
        yield flush()
