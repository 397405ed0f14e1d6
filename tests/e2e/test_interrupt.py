"""Ctrl-C on a real `evr1 run`: the first interrupt stops the run within seconds, prints one line
(where it stopped and the command that resumes), leaves no process of the run and no MLflow run
RUNNING, and the same command resumes to the end.

The terminal's Ctrl-C is simulated as a terminal sends it: SIGINT to the command's whole process
group (the test starts the command as the leader of its own group)."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import time
from pathlib import Path

import psutil
import pytest

ROOT = Path(__file__).resolve().parents[2]
EVR1 = str(Path(os.sys.executable).parent / "evr1")
# 200 clips make the cache stage last about a second and a half (it is 0.2 s with 8), so the interrupt
# sent on seeing "cache" lands inside it; training and eval sizes do not depend on it.
OVERRIDES = ["run.name=ctl", "data.synth.n=200", "data.synth.heldout=2", "trainer.steps=6", "trainer.warmup_sft_steps=1",
             "trainer.prompts_per_step=2", "rollout.n=2", "trainer.world_size=1", "rollout.max_new_tokens=4",
             "trainer.save_every=1", "eval.max_new_tokens=4", "cache.workers=0"]


def _start(root: Path) -> tuple[subprocess.Popen, list[str]]:
    args = [EVR1, "run", str(ROOT / "conf" / "tiny.yaml"), f"run.root={root}", *OVERRIDES]
    # As a terminal starts a foreground command: SIGINT at its default, whatever this process was given
    # (a job started with `&` by a shell without job control, as a CI script may be, ignores SIGINT,
    # and its children inherit that: the command would never see the Ctrl-C this test sends).
    return subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=root,
                            start_new_session=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL)), args


def _wait_for(status: Path, stage: str, proc: subprocess.Popen, timeout: float = 600) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            s = json.loads(status.read_text())
            if s["stage"] == stage and (stage != "train" or s["done"] >= 1):
                return s
        except (OSError, ValueError):
            pass
        time.sleep(0.02)
    raise AssertionError(f"the run never reached {stage} (exit {proc.poll()})")


def _processes_of(status: Path) -> list[int]:
    """Processes whose environment names this run's status file: the supervised child and all it started."""
    needle = f"EVR1_RUN_STATUS={status}"
    found = []
    for p in psutil.process_iter(["pid"]):
        try:
            if needle in "\0".join(f"{k}={v}" for k, v in p.environ().items()):
                found.append(p.pid)
        except (psutil.Error, OSError):
            continue
    return found


def _running_mlflow_runs(root: Path) -> int:
    with sqlite3.connect(root / "ctl" / "mlflow.db") as db:
        return db.execute("select count(*) from runs where status = 'RUNNING'").fetchone()[0]


def _interrupt(root: Path, stage: str) -> str:
    proc, args = _start(root)
    status = root / "ctl" / ".evr1-status.json"
    _wait_for(status, stage, proc)
    t0 = time.monotonic()
    os.killpg(proc.pid, signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    took = time.monotonic() - t0
    last = err.strip().splitlines()[-1]
    assert proc.returncode == 130, err[-3000:]
    assert last.startswith(f"evr1: interrupted during {stage}"), err[-3000:]
    assert last.endswith("Resume with: " + " ".join(args)), last
    assert "Traceback" not in err and "ConnectError" not in err, err[-3000:]
    assert took < 30, took  # the supervisor kills what is left after 8 s; before, this took minutes
    time.sleep(10)
    assert _processes_of(status) == []
    assert _running_mlflow_runs(root) == 0
    assert (root / "ctl" / "interrupt.log").exists()  # what the child printed while unwinding
    return last


@pytest.mark.e2e
def test_ctrl_c_stops_in_seconds_and_the_same_command_resumes(tmp_path):
    _interrupt(tmp_path, "cache")
    line = _interrupt(tmp_path, "train")
    assert "(step " in line
    _interrupt(tmp_path, "eval")
    proc, _ = _start(tmp_path)
    out, err = proc.communicate(timeout=900)
    assert proc.returncode == 0, err[-3000:]
    summary = (tmp_path / "ctl" / "summary.md").read_text()
    assert "| ingest | cached |" in summary and "| cache | cached |" in summary  # finished stages are reused
    assert _running_mlflow_runs(tmp_path) == 0
