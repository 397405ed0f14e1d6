"""What crosses between a rank's device and its host during a pass, and how it is read back.

The rules that keep a step free of per-micro-batch host waits (issue 33): results leave the device
with `to_host` (queued, non-blocking), are read after one `wait_for_copies` per pass, and scalar
metrics come back in one copy per step (`host_values`). Inputs go the other way through pinned
memory (`evr1.models.batch.to_device`).
"""

from __future__ import annotations

from collections.abc import Mapping

import torch


def has_media(batch) -> bool:
    """Whether a micro-batch holds any image or video (prepared or still uint8)."""
    return bool(batch.pending_images or batch.pending_videos) or any(
        k in batch.mm for k in ("pixel_values", "pixel_values_videos"))


def to_host(t: torch.Tensor) -> torch.Tensor:
    """A host copy of device tensor `t`, queued behind the device's work (pinned destination, no
    host wait); read it only after `wait_for_copies`. A host tensor is returned as it is."""
    return t if t.device.type == "cpu" else t.to("cpu", non_blocking=True)


def wait_for_copies(device: str) -> None:
    """Wait for the `to_host` copies queued on `device`'s current stream."""
    if torch.device(device).type == "cuda":
        torch.cuda.current_stream().synchronize()


def response_rows(kept: list[tuple], rows: int, *, with_log_probs: bool) -> dict[str, list | None]:
    """Per response of the shard, its entropy (and log-probs) cut at its length; None where unreadable.
    Reads the host copies the update queued (`to_host`): call it after a wait for the stream they are on."""
    entropy: list[list[float] | None] = [None] * rows
    log_probs: list[list[float] | None] = [None] * rows
    for first, lengths, readable, ent, lp in kept:
        for r, (n, ok) in enumerate(zip(lengths, readable)):
            if ok:
                entropy[first + r] = ent[r, :n].tolist()
                if lp is not None:
                    log_probs[first + r] = lp[r, :n].tolist()
    return {"entropy": entropy, "log_probs": log_probs if with_log_probs else None}


def host_values(rows: list[dict[str, torch.Tensor]]) -> list[dict[str, float]]:
    """0-d metric tensors → Python floats, every one in a single device-to-host copy. float64 holds
    each fp32/bf16 value exactly: the floats equal `float(tensor)`'s one by one."""
    flat = [v for row in rows for v in row.values()]
    if not flat:
        return [{} for _ in rows]
    values = iter(torch.stack([v.detach().reshape(()).to(torch.float64) for v in flat]).tolist())
    return [{key: next(values) for key in row} for row in rows]


def padded(rows: list[list[float]], shape) -> torch.Tensor:
    """Per-response value lists → a [B, L] float tensor, zero past each response's length."""
    out = torch.zeros(shape, dtype=torch.float32)
    for row, values in enumerate(rows):
        out[row, : len(values)] = torch.tensor(values, dtype=torch.float32)
    return out


def tensors_in(item):
    """Every tensor inside a (nested) model output: tuples, lists, dicts and HF ModelOutputs."""
    if torch.is_tensor(item):
        yield item
    elif isinstance(item, Mapping):
        for value in item.values():
            yield from tensors_in(value)
    elif isinstance(item, (tuple, list)):
        for value in item:
            yield from tensors_in(value)
