"""`evr1 train` killed with -9, then with SIGTERM, then run to the end: no process of a killed command
survives it (checked by PID), its Ray temp folder is gone, its MLflow runs end KILLED (never RUNNING),
and the training continues in ONE MLflow run that holds each step once."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from mlflow.tracking import MlflowClient

from evr1.cluster.local import MARKER

ROOT = Path(__file__).resolve().parents[2]
STEPS = 6


def overrides(tmp_path: Path) -> list[str]:
    return [f"run.root={tmp_path}", "run.name=kill", "data.synth.n=6", "data.synth.heldout=2",
            "model.tiny.family=qwen2_5_vl", "trainer.prompts_per_step=2", "rollout.n=2", "trainer.world_size=1",
            "trainer.micro_batch_size=4", "rollout.max_new_tokens=6", "cache.workers=0", "trainer.save_every=1",
            "trainer.keep_last=2", "trainer.warmup_sft_steps=0", "trainer.val_every=0", f"trainer.steps={STEPS}"]


def start(tmp_path: Path, log: str) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "evr1.cli", "train", str(ROOT / "conf/tiny.yaml"), *overrides(tmp_path)]
    env = {**os.environ, "EVR1_DEBUG": "1", "PYTHONFAULTHANDLER": "1"}  # a failure shows its traceback
    return subprocess.Popen(cmd, cwd=ROOT, stdout=open(tmp_path / log, "w"), stderr=subprocess.STDOUT, env=env)


def saved_steps(tmp_path: Path) -> set[int]:
    return {int(p.name.split("_")[1]) for p in (tmp_path / "kill" / "checkpoints").glob("*/step_*[0-9]")}


def wait_for_new_checkpoint(tmp_path: Path, proc: subprocess.Popen, log: str, timeout: float = 300) -> None:
    """Until the command saves a checkpoint after a step none saved before (so it is mid-training)."""
    before = max(saved_steps(tmp_path), default=0)
    deadline = time.monotonic() + timeout
    while max(saved_steps(tmp_path), default=0) <= before:
        assert proc.poll() is None, f"evr1 train ended early ({proc.returncode}): {tail(tmp_path, log)}"
        assert time.monotonic() < deadline, "no checkpoint in time"
        time.sleep(0.2)


def tail(tmp_path: Path, log: str) -> str:
    """The command's output without MLflow's own warnings (not evr1's to silence)."""
    lines = (tmp_path / log).read_text().splitlines()
    return "\n".join(line for line in lines if "dataset_source" not in line)[-3000:]


def processes_of(pid: int) -> tuple[set[int], list[str]]:
    """The command's process tree, every process of the Ray instance it started (by the marker in their
    environment), and the Ray temp folders its watchdogs will remove."""
    found = {pid} | {c.pid for c in psutil.Process(pid).children(recursive=True)}
    temp_dirs = []
    for p in psutil.process_iter(["cmdline"]):
        try:
            if p.environ().get(MARKER, "").startswith(f"{pid}-"):
                found.add(p.pid)
            cmd = p.info["cmdline"] or []
            if "evr1.cluster.local" in cmd and cmd[cmd.index("evr1.cluster.local") + 1] == str(pid):
                found.add(p.pid)  # the watchdog must end too, once it has cleaned up
                temp_dirs.append(cmd[-1])
        except (psutil.Error, IndexError, ValueError):
            continue
    return found, temp_dirs


def assert_all_gone(pids: set[int], temp_dirs: list[str], timeout: float = 60) -> None:
    def alive(pid: int) -> bool:
        try:
            return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return False

    deadline = time.monotonic() + timeout
    while (left := {p for p in pids if alive(p)}) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not left, {p: " ".join(psutil.Process(p).cmdline())[:120] for p in left if alive(p)}
    assert temp_dirs and not any(os.path.exists(d) for d in temp_dirs)


def runs(tmp_path: Path) -> list:
    client = MlflowClient(f"sqlite:///{tmp_path / 'kill' / 'mlflow.db'}")
    exp = client.get_experiment_by_name("evr1-tiny")
    return client, client.search_runs([exp.experiment_id])


@pytest.mark.e2e
@pytest.mark.slow
def test_killed_training_leaves_no_process_and_continues_in_one_run(tmp_path):
    # 1. kill -9 during training: nothing of the command survives, its runs are left for the next command.
    first = start(tmp_path, "first.log")
    wait_for_new_checkpoint(tmp_path, first, "first.log")
    pids, temp_dirs = processes_of(first.pid)
    assert len(pids) > 3, pids  # the command, its watchdog, and a Ray instance (GCS, raylet, actors ...)
    first.send_signal(signal.SIGKILL)
    first.wait()
    assert_all_gone(pids, temp_dirs)

    # 2. SIGTERM: the command closes its own runs KILLED and exits 143; the first command's runs are
    #    closed KILLED when this one starts (their owner is dead).
    second = start(tmp_path, "second.log")
    wait_for_new_checkpoint(tmp_path, second, "second.log")
    pids, temp_dirs = processes_of(second.pid)
    second.send_signal(signal.SIGTERM)
    assert second.wait(timeout=120) == 128 + signal.SIGTERM, tail(tmp_path, "second.log")
    assert_all_gone(pids, temp_dirs)
    client, listed = runs(tmp_path)
    assert {r.info.status for r in listed} <= {"FINISHED", "KILLED"}
    parents = [r for r in listed if "mlflow.parentRunId" not in r.data.tags]
    assert [r.info.status for r in sorted(parents, key=lambda r: r.info.start_time)] == ["KILLED", "KILLED"]

    # 3. To the end: the same training run continues, each step logged once, nothing left RUNNING.
    third = start(tmp_path, "third.log")
    assert third.wait(timeout=300) == 0, tail(tmp_path, "third.log")
    client, listed = runs(tmp_path)
    assert "RUNNING" not in {r.info.status for r in listed}
    (train,) = [r for r in listed if r.data.tags.get("evr1.stage") == "train"]
    assert train.info.status == "FINISHED"
    for key in ("reward/overall", "actor/entropy"):
        assert [m.step for m in client.get_metric_history(train.info.run_id, key)] == list(range(1, STEPS + 1))
    log = (tmp_path / "third.log").read_text()
    assert "fork-safe" not in log and "Loading weights" not in log and "Writing model shards" not in log
