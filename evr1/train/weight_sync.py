"""Handing the policy's weights to a rollout engine: streamed, cast to the engine's dtype, one FSDP unit at a
time, never a full state dict.

`iter_sync_weights(model, dtype=torch.bfloat16)` is a generator every rank of the FSDP group runs to the
end, in the same order (it is collective: each unit's gather is an all-gather). It yields
`(name, full tensor)` for every parameter and persistent buffer under its Hugging Face state-dict name
(`model.language_model.layers.0.self_attn.q_proj.weight`, `model.visual.*`, ...), each exactly once, so a
rank feeds the items straight into the engine living in its own process (`HFEngine.update_weights`,
`VLLMEngine.update_weights` take an iterable of pairs) and holds at most one unit unsharded plus the item
being consumed, where `get_model_state_dict(full_state_dict=True)` held the whole model in float32.

Two ways to gather, the same result bit for bit:

* `layerwise=True` (default): per FSDP unit (`FSDPModule`, in module order: the root's own parameters
  first, then each decoder block), `unshard()`, yield the unit's own tensors (not those of units nested
  in it), `reshard()`. `unshard()` all-gathers in the unit's `MixedPrecisionPolicy.param_dtype` when the
  policy sets one (bf16 on CUDA, `workers/precision.py`: FSDP2 casts each rank's float32 shard to bf16,
  then gathers), else in the stored dtype (float32 on the CPU, where `precision()` sets no policy). A
  cast is elementwise and deterministic, so the bf16 gather of float32 shards is bit-equal to casting the
  gathered float32 tensor: exactly `get_model_state_dict(full_state_dict=True)` cast to `dtype`, at half
  the bytes. Where the gathered dtype is neither the stored one nor `dtype` (a bf16 policy and a float32
  engine, or `dtype=None`, which keeps the stored float32), the gathered values would be rounded twice:
  that unit's gather is dropped (resharded) and its tensors are gathered one by one from the float32
  shards instead, so the output stays exact (one wasted gather per unit in that combination only).
* `layerwise=False`: per tensor, `DTensor.to(dtype).full_tensor()` (the cast before the gather halves
  the bytes); one full tensor at a time, one collective per tensor.

Tensors that are not DTensors (a model that is not sharded, buffers) pass as they are, cast when
floating. Tied weights (Qwen's tiny and small models tie `lm_head.weight` to
`model.language_model.embed_tokens.weight`) are yielded once, under the name the saved checkpoint
keeps: transformers drops the tied targets (`all_tied_weights_keys`, e.g. `lm_head.weight`) when saving;
a model without that table keeps the first name in module order. That is enough for an engine whose
model keeps the tie (HF). `tied_names=True` yields the tensor under each of its names, one after the
other (no second gather): vLLM ties them when it builds the model, but its layerwise reload
(`vllm_sync.py`) re-creates each layer's parameters, so a `lm_head` that receives no weights of its own
keeps the ones it had. Sent once, the output projection stayed at the checkpoint's values after every
update (measured on vLLM's CPU build: log-prob gap 0.01 after one RL step, 0.1 after a warm-up step;
2e-6 with both names). The cost is the tied tensor's bytes once more, for tied models only.

Lifetime: FSDP frees a unit's unsharded parameters at `reshard()` (storage resized to 0). By default
(`copy=True`) a yielded tensor that would be a view of that memory (the cast was a no-op: a bf16 gather
for a bf16 engine, float32 for float32) is cloned, so a consumer may keep it; `copy=False` saves that
copy for a consumer that copies each item at once (`HFEngine.update_weights`, `pack_buckets`): each
tensor is then valid only until the next item is requested (kept longer, it reads freed memory: a
segfault on the CPU). `vllm_sync.write_buckets` keeps a bucket's tensors until the bucket is full and
copies them only when they are on an accelerator (`.to("cpu")`): on the CPU it needs `copy=True`.

For a rollout worker in another process: `pack_buckets` packs the stream into contiguous uint8 buffers
with their `TensorMeta`s (one buffer per bucket, cheap to send), `unpack` turns a bucket back into named
views. `check_complete` fails a sync that missed a tensor the engine holds, or sent one it does not
know (a silently stale layer otherwise); `counting` tallies what streams through into a `SyncReport`.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, fields

import torch
from torch.distributed.fsdp import FSDPModule
from torch.distributed.tensor import DTensor

# Wrapper modules whose attribute names torch.distributed's state-dict helpers leave out of names.
_WRAPPER_PREFIXES = ("_fsdp_wrapped_module.", "_checkpoint_wrapped_module.", "_orig_mod.")


# -- the gather ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Entry:
    """One tensor to send: where it lives now (the attribute, swapped by unshard/reshard), its name."""

    name: str
    module: torch.nn.Module
    attr: str


def _clean(name: str) -> str:
    for prefix in _WRAPPER_PREFIXES:
        name = name.replace(prefix, "")
    return name


def _tied_targets(model: torch.nn.Module) -> set[str]:
    """Names transformers drops when saving because they alias another (`{target: source}` or a list)."""
    tied = getattr(model, "all_tied_weights_keys", None) or getattr(model, "_tied_weights_keys", None) or {}
    try:
        return {_clean(str(name)) for name in tied}
    except TypeError:  # an unexpected layout: keep the module-order rule
        return set()


def _plan(model: torch.nn.Module, tied_names: bool = False) -> list[tuple[FSDPModule | None, list[_Entry]]]:
    """Every parameter and persistent buffer once (`tied_names`: under each of its names), grouped by
    the FSDP unit that holds it (its nearest `FSDPModule` ancestor, None outside any; a tied tensor's
    names go with its first name's unit), units in module order, entries in state-dict order."""
    tied = _tied_targets(model)
    groups: dict[int, tuple[FSDPModule | None, list[_Entry]]] = {}
    aliases: dict[int, list[_Entry]] = {}  # id(tensor) -> every name it is registered under
    owner: dict[int, int] = {}  # id(tensor) -> the unit key of its first name

    def visit(module: torch.nn.Module, prefix: str, unit: FSDPModule | None) -> None:
        if isinstance(module, FSDPModule):
            unit = module
        key = id(unit)
        groups.setdefault(key, (unit, []))
        for attr, param in module._parameters.items():
            if param is not None:
                _add(_Entry(_clean(prefix + attr), module, attr), param, key)
        for attr, buf in module._buffers.items():
            if buf is not None and attr not in module._non_persistent_buffers_set:
                _add(_Entry(_clean(prefix + attr), module, attr), buf, key)
        for child_name, child in module._modules.items():
            if child is not None:
                visit(child, f"{prefix}{child_name}.", unit)

    def _add(entry: _Entry, tensor: torch.Tensor, key: int) -> None:
        names = aliases.setdefault(id(tensor), [])
        if not names:
            owner[id(tensor)] = key
        names.append(entry)

    visit(model, "", None)
    for tid, names in aliases.items():  # insertion order: the module walk's, by first name
        if tied_names:
            groups[owner[tid]][1].extend(names)
            continue
        kept = [e for e in names if e.name not in tied] or names
        groups[owner[tid]][1].append(kept[0])
    return [(unit, entries) for unit, entries in groups.values() if entries]


def sync_names(model: torch.nn.Module, tied_names: bool = False) -> list[str]:
    """The names `iter_sync_weights(model, ...)` yields, in its order, without gathering anything (not
    collective): what an engine holding this architecture expects (`check_complete`)."""
    return [e.name for _, entries in _plan(model, tied_names) for e in entries]


def _cast(t: torch.Tensor, dtype: torch.dtype | None) -> torch.Tensor:
    return t.to(dtype) if dtype is not None and t.is_floating_point() else t


def _full(t: torch.Tensor, dtype: torch.dtype | None) -> torch.Tensor:
    """The whole tensor in `dtype` (floating only): a DTensor is cast on its shard, then gathered."""
    t = _cast(t.detach(), dtype)
    return t.full_tensor() if isinstance(t, DTensor) else t


def _exact_after_unshard(entries: list[_Entry], stored: dict[str, torch.dtype], dtype: torch.dtype | None) -> bool:
    """Whether the unsharded tensors give exactly the stored values cast to `dtype` (see module docstring)."""
    for e in entries:
        t = getattr(e.module, e.attr)
        if isinstance(t, DTensor) or not t.is_floating_point():
            continue
        target = dtype if dtype is not None else stored[e.name]
        if t.dtype not in (stored[e.name], target):
            return False
    return True


def iter_sync_weights(model: torch.nn.Module, *, dtype: torch.dtype | None, layerwise: bool = True,
                      copy: bool = True, tied_names: bool = False) -> Iterator[tuple[str, torch.Tensor]]:
    """(name, full tensor) for every parameter and persistent buffer of `model`, each once (`tied_names`:
    a tied one under each of its names, see the module docstring), floating ones cast to `dtype` (None:
    as stored), in `sync_names(model, tied_names)`'s order. COLLECTIVE: every rank of the FSDP
    group runs it to the end, in the same order; a rank that stops early leaves its peers waiting in a
    gather (the process group's timeout ends it).

    `copy=False`: a tensor may be a view of the unit's unsharded parameter, which `reshard()` frees:
    valid only until the next item is requested (for a consumer that copies each item at once:
    `HFEngine.update_weights`, `pack_buckets`); kept longer, it reads freed memory (a segfault on the
    CPU). `copy=True` (default) clones those (one tensor at a time, where the cast did not already make
    a new one), so a consumer may keep what it receives. A model that is not sharded yields its own
    (detached) tensors when the cast leaves them as they are."""
    for module in model.modules():  # one a forward left unsharded (the root) shows its stored tensors again
        if isinstance(module, FSDPModule):
            module.reshard()  # not collective; a no-op when sharded
    plan = _plan(model, tied_names)
    for unit, entries in plan:
        if layerwise and unit is not None:
            yield from _unit_items(unit, entries, dtype, copy)
        else:
            for e in entries:
                yield e.name, _full(getattr(e.module, e.attr), dtype)


def _unit_items(unit: FSDPModule, entries: list[_Entry], dtype: torch.dtype | None,
                copy: bool) -> Iterator[tuple[str, torch.Tensor]]:
    """One FSDP unit: unshard, its own tensors, reshard (also when the consumer fails or stops)."""
    stored = {e.name: getattr(e.module, e.attr).dtype for e in entries}
    unit.unshard()
    try:
        exact = _exact_after_unshard(entries, stored, dtype)
        if not exact:  # the gather dtype would round twice: back to the shards, tensor by tensor
            unit.reshard()
        for e in entries:
            # A tensor its unit's unshard left sharded (tied to another unit's) is gathered on its own.
            t = getattr(e.module, e.attr).detach()
            out = _full(t, dtype)
            if copy and not isinstance(t, DTensor) and out.untyped_storage().data_ptr() == t.untyped_storage().data_ptr():
                out = out.clone()  # FSDP frees the unsharded storage at reshard()
            yield e.name, out
    finally:
        unit.reshard()


# -- accounting ------------------------------------------------------------------------------------


@dataclass
class SyncReport:
    """What one sync did and how long each part took (seconds); `version` is the policy version sent."""

    gather_s: float = 0.0  # inside the producer: all-gathers, casts
    load_s: float = 0.0  # inside the engine: copies, `load_weights`, buckets written or sent
    reset_s: float = 0.0  # cache resets after the load (prefix, encoder)
    wake_s: float = 0.0  # waking a sleeping engine before the load
    sleep_s: float = 0.0  # putting it back to sleep
    bytes: int = 0  # payload: Σ numel · itemsize of what was sent, after the cast
    tensors: int = 0
    buckets: int = 0
    version: int = 0
    names: list[str] = field(default_factory=list, repr=False, compare=False)  # filled by `counting`

    @property
    def total_s(self) -> float:
        return self.gather_s + self.load_s + self.reset_s + self.wake_s + self.sleep_s

    def as_metrics(self, prefix: str = "perf/sync_") -> dict[str, float]:
        out = {f"{prefix}{f.name}": float(getattr(self, f.name)) for f in fields(self) if f.name != "names"}
        out[f"{prefix}total_s"] = self.total_s
        return out


def counting(items: Iterable[tuple[str, torch.Tensor]], report: SyncReport) -> Iterator[tuple[str, torch.Tensor]]:
    """`items` unchanged, tallied into `report` as they pass: tensors, payload bytes, names (in
    `report.names`, for `check_complete`), and the time spent producing them (`gather_s`: the time
    inside the producer's `next`, so not the consumer's time between items)."""
    it = iter(items)
    while True:
        start = time.perf_counter()
        try:
            name, tensor = next(it)
        except StopIteration:
            report.gather_s += time.perf_counter() - start
            return
        report.gather_s += time.perf_counter() - start
        report.tensors += 1
        report.bytes += tensor.numel() * tensor.element_size()
        report.names.append(name)
        yield name, tensor


class SyncIncomplete(RuntimeError):
    """A sync that missed a tensor the engine holds, or sent one it does not know, or one twice."""


def check_complete(sent: Iterable[str], expected: Iterable[str], *, where: str, show: int = 5) -> None:
    """Raise `SyncIncomplete` unless `sent` holds every name of `expected` exactly once and nothing else.
    A sync that misses a parameter the engine holds is an error, not a silently stale layer."""
    counts = Counter(sent)
    wanted = set(expected)
    missing = sorted(wanted - counts.keys())
    unexpected = sorted(counts.keys() - wanted)
    twice = sorted(name for name, n in counts.items() if n > 1)
    if not (missing or unexpected or twice):
        return

    def listed(names: list[str]) -> str:
        more = f", … {len(names) - show} more" if len(names) > show else ""
        return ", ".join(names[:show]) + more

    parts = [f"{len(missing)} missing ({listed(missing)})" if missing else "",
             f"{len(unexpected)} unexpected ({listed(unexpected)})" if unexpected else "",
             f"{len(twice)} sent more than once ({listed(twice)})" if twice else ""]
    raise SyncIncomplete(f"{where}: weight sync incomplete: {'; '.join(p for p in parts if p)} "
                         f"[{sum(counts.values())} sent, {len(wanted)} expected]")


# -- buckets across a process boundary -------------------------------------------------------------

ALIGN = 16  # every tensor starts at a multiple of 16 bytes: `view(dtype)` and vectorised copies need it


@dataclass(frozen=True)
class TensorMeta:
    name: str
    dtype: torch.dtype
    shape: tuple[int, ...]
    offset: int  # bytes from the start of the bucket's buffer
    nbytes: int


@dataclass
class Bucket:
    """Tensors packed back to back (each at a multiple of `ALIGN`) into one contiguous uint8 buffer."""

    buffer: torch.Tensor
    metas: list[TensorMeta]

    @property
    def nbytes(self) -> int:
        return int(self.buffer.numel())

    def __len__(self) -> int:
        return len(self.metas)


def _aligned(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


def _as_bytes(t: torch.Tensor) -> torch.Tensor:
    return t.detach().contiguous().reshape(-1).view(torch.uint8)


def pack_buckets(items: Iterable[tuple[str, torch.Tensor]], bucket_bytes: int, *, device: str | torch.device = "cpu",
                 reuse: bool = False) -> Iterator[Bucket]:
    """Copy the stream into buckets of at most `bucket_bytes` (a tensor larger than that gets a bucket of
    its own, sized to it), on `device`. Each item is copied in as it arrives, so the producer's tensors
    need to live only until the next item (`iter_sync_weights`' contract). `reuse=True`: one buffer of
    `bucket_bytes` serves every bucket that fits it; a bucket is then valid until the next is requested."""
    if bucket_bytes < 1:
        raise ValueError(f"pack_buckets: field bucket_bytes must be ≥ 1, got {bucket_bytes}")
    shared: torch.Tensor | None = None
    buffer: torch.Tensor | None = None
    metas: list[TensorMeta] = []
    used = 0

    def fresh() -> torch.Tensor:
        nonlocal shared
        if not reuse:
            return torch.empty(bucket_bytes, dtype=torch.uint8, device=device)
        if shared is None:
            shared = torch.empty(bucket_bytes, dtype=torch.uint8, device=device)
        return shared

    for name, tensor in items:
        nbytes = tensor.numel() * tensor.element_size()
        shape = tuple(tensor.shape)
        if nbytes > bucket_bytes:  # alone, in a buffer of its own size
            if metas:
                yield Bucket(buffer[:used], metas)
                buffer, metas, used = None, [], 0
            own = torch.empty(nbytes, dtype=torch.uint8, device=device)
            own.copy_(_as_bytes(tensor))
            yield Bucket(own, [TensorMeta(name, tensor.dtype, shape, 0, nbytes)])
            continue
        offset = _aligned(used)
        if metas and offset + nbytes > bucket_bytes:
            yield Bucket(buffer[:used], metas)
            buffer, metas, used, offset = None, [], 0, 0
        if buffer is None:
            buffer = fresh()
        buffer[offset:offset + nbytes].copy_(_as_bytes(tensor))
        metas.append(TensorMeta(name, tensor.dtype, shape, offset, nbytes))
        used = offset + nbytes
    if metas:
        yield Bucket(buffer[:used], metas)


def unpack(bucket: Bucket) -> list[tuple[str, torch.Tensor]]:
    """The bucket's tensors as (name, view into its buffer) with their dtype and shape, in packing order."""
    out = []
    for m in bucket.metas:
        raw = bucket.buffer[m.offset:m.offset + m.nbytes]
        out.append((m.name, raw.view(m.dtype).reshape(m.shape)))
    return out
