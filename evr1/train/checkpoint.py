"""Checkpoint layout: `<dir>/step_000004/` holds the sharded model+optimizer (torch.distributed.checkpoint)
and `trainer_state.json` (step, data cursor, seeds, base model); `<dir>/latest` names the newest one.

A checkpoint is written into `step_N.tmp/` and renamed into place when complete, so a directory
named `step_N` always holds a whole checkpoint; resume ignores leftovers.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

STATE_FILE = "trainer_state.json"


def step_dir(root: Path, step: int) -> Path:
    return root / f"step_{step:06d}"


def write_state(ckpt: Path, state: dict) -> None:
    tmp = ckpt / (STATE_FILE + ".tmp")
    tmp.write_text(json.dumps(state, indent=2))
    os.replace(tmp, ckpt / STATE_FILE)


def publish(tmp: Path, final: Path) -> None:
    """Move a finished `step_N.tmp` into place and point `latest` at it."""
    if final.exists():
        shutil.rmtree(final)
    os.replace(tmp, final)
    latest = final.parent / "latest.tmp"
    latest.write_text(final.name)
    os.replace(latest, final.parent / "latest")


def clear(root: Path) -> None:
    """Remove every checkpoint under `root` (a run that must not resume)."""
    for p in root.glob("step_*"):
        shutil.rmtree(p, ignore_errors=True)
    (root / "latest").unlink(missing_ok=True)


def read_state(ckpt: Path) -> dict:
    return json.loads((ckpt / STATE_FILE).read_text())


def latest_checkpoint(root: Path) -> Path | None:
    """The newest complete checkpoint under `root`, or None."""
    pointer = root / "latest"
    if pointer.exists():
        ckpt = root / pointer.read_text().strip()
        if (ckpt / STATE_FILE).exists():
            return ckpt
    complete = sorted(p for p in root.glob("step_*") if (p / STATE_FILE).exists() and not p.name.endswith(".tmp"))
    return complete[-1] if complete else None


def resolve(path: Path, key: str = "trainer.init_from") -> Path:
    """The checkpoint `path` names: a `step_N` folder, or a run's checkpoint folder (its newest one).
    A clear error naming `key` otherwise."""
    path = Path(path)
    if (path / STATE_FILE).exists():
        return path
    found = latest_checkpoint(path) if path.is_dir() else None
    if found is None:
        raise ValueError(f"{key}={path}: no checkpoint there (expected a step_N folder holding {STATE_FILE}, "
                         "or a run's checkpoints/<fingerprint> folder with one)")
    return found


def prune(root: Path, keep_last: int) -> None:
    """Keep the newest `keep_last` complete checkpoints; remove older ones and unfinished `.tmp` saves."""
    complete = sorted(p for p in root.glob("step_*") if (p / STATE_FILE).exists() and not p.name.endswith(".tmp"))
    for p in complete[:-keep_last]:
        shutil.rmtree(p, ignore_errors=True)
    for p in root.glob("step_*.tmp"):
        shutil.rmtree(p, ignore_errors=True)


def tensor_digest(tensor: torch.Tensor) -> str:
    """A digest of `tensor`'s values as contiguous fp32 on the host (bf16 and fp16 widen exactly), so
    a weight stored in either dtype digests alike: what the trainer writes into `probe.pt` for each
    trained tensor and merge (`evr1.train.merge`) checks the merged model against."""
    import torch  # this module is read by the flows without torch

    # A copy: `.numpy()` marks a storage non-resizable, and FSDP2 frees an unsharded one by resizing it.
    data = tensor.detach().to("cpu", torch.float32, copy=True).contiguous()
    return hashlib.blake2b(data.numpy().tobytes(), digest_size=16).hexdigest()
