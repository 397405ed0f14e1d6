"""Checkpoint layout: `<dir>/step_000004/` holds the sharded model+optimizer (torch.distributed.checkpoint)
and `trainer_state.json` (step, data cursor, seeds, base model); `<dir>/latest` names the newest one.

The state file is written last and renamed into place, so a directory without it is an incomplete
save that resume ignores.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

STATE_FILE = "trainer_state.json"


def step_dir(root: Path, step: int) -> Path:
    return root / f"step_{step:06d}"


def write_state(ckpt: Path, state: dict) -> None:
    tmp = ckpt / (STATE_FILE + ".tmp")
    tmp.write_text(json.dumps(state, indent=2))
    os.replace(tmp, ckpt / STATE_FILE)
    latest = ckpt.parent / "latest.tmp"
    latest.write_text(ckpt.name)
    os.replace(latest, ckpt.parent / "latest")


def read_state(ckpt: Path) -> dict:
    return json.loads((ckpt / STATE_FILE).read_text())


def latest_checkpoint(root: Path) -> Path | None:
    """The newest complete checkpoint under `root`, or None."""
    pointer = root / "latest"
    if pointer.exists():
        ckpt = root / pointer.read_text().strip()
        if (ckpt / STATE_FILE).exists():
            return ckpt
    complete = sorted(p for p in root.glob("step_*") if (p / STATE_FILE).exists())
    return complete[-1] if complete else None


def prune(root: Path, keep_last: int) -> None:
    """Remove all but the newest `keep_last` complete checkpoints, and any incomplete ones."""
    complete = sorted(p for p in root.glob("step_*") if (p / STATE_FILE).exists())
    for p in complete[:-keep_last]:
        shutil.rmtree(p, ignore_errors=True)
    newest = complete[-1] if complete else None
    for p in root.glob("step_*"):
        if not (p / STATE_FILE).exists() and (newest is None or p.name < newest.name):
            shutil.rmtree(p, ignore_errors=True)
