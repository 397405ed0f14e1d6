"""Ctrl-C for `evr1 run`: one interrupt stops the run within seconds and prints one line.

A terminal's Ctrl-C reaches every process in its foreground group. When the flow ran in the `evr1`
process itself, that included Prefect's temporary API server and Ray's head: the server died first,
and the flow's crash handlers then retried it for minutes, printing a page of connection errors.

So `evr1 run` supervises: the flow runs in a child process in a session of its own, which the
terminal's signal never reaches. On the first Ctrl-C the supervisor sends the child one SIGINT; the
child sends what it prints from then on to `interrupt.log` in the run folder (the terminal gets one
line), unwinds (open MLflow runs close KILLED, Ray and the frame cache shut down, Lance commits and
checkpoints are atomic by construction) and exits. What is still alive after `GRACE_S` (or at a
second Ctrl-C) is killed with the child's session; the local Ray instance's watchdog reaps Ray's
processes, and MLflow runs the kill left RUNNING are closed KILLED here. The same command resumes:
finished stages come from the cache and training from its latest checkpoint.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

STATUS_ENV = "EVR1_RUN_STATUS"  # set in the child: where it keeps its status (the supervisor reads it)
GRACE_S = 8.0


def status_path(run_dir: Path) -> Path:
    return run_dir / ".evr1-status.json"


def in_child() -> bool:
    return STATUS_ENV in os.environ


def resume_command(argv: list[str]) -> str:
    """The command line that was run, as the user can type it again."""
    prog = sys.argv[0]
    if Path(prog).name == "__main__.py":  # `python -m evr1.cli`
        return shlex.join([sys.executable, "-m", "evr1.cli", *argv])
    return shlex.join([prog, *argv])


def where(status: Path) -> str:
    """'during train (step 3 of 10)' from the child's status file ('before the first stage' without one)."""
    try:
        s = json.loads(status.read_text())
    except (OSError, ValueError):
        return "before the first stage"
    done, total, unit = int(s.get("done", 0)), int(s.get("total", 0)), s.get("unit", "")
    singular = unit[:-1] if unit.endswith("s") else unit
    return f"during {s['stage']} ({singular} {done} of {total})" if total else f"during {s['stage']}"


def supervise(argv: list[str], run_dir: Path) -> int:
    """Run `evr1 <argv>` as a child in its own session; returns its exit code, or 130 after Ctrl-C."""
    status = status_path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    status.unlink(missing_ok=True)
    env = {**os.environ, STATUS_ENV: str(status)}
    child = subprocess.Popen([sys.executable, "-m", "evr1.cli", *argv], env=env, start_new_session=True)
    try:
        return child.wait()
    except KeyboardInterrupt:
        pass
    t0 = time.monotonic()
    at = where(status)  # read now: while it unwinds, the child may still move on to the next stage
    with _ignored(signal.SIGINT):  # a second Ctrl-C is taken below as "kill now"
        child.send_signal(signal.SIGINT)
    try:
        child.wait(timeout=GRACE_S)
    except (subprocess.TimeoutExpired, KeyboardInterrupt):
        _kill_session(child)
    seconds = time.monotonic() - t0
    print(f"evr1: interrupted {at}; stopped in {seconds:.0f} s. Resume with: {resume_command(argv)}",
          file=sys.stderr)
    return 130


class _ignored:
    def __init__(self, signum: int):
        self.signum = signum

    def __enter__(self):
        self.previous = signal.signal(self.signum, signal.SIG_IGN)

    def __exit__(self, *exc):
        signal.signal(self.signum, self.previous)


def _kill_session(child: subprocess.Popen) -> None:
    try:
        os.killpg(child.pid, signal.SIGKILL)  # the child leads its session's process group
    except ProcessLookupError:
        pass
    child.wait()


def quiet_on_interrupt(log: Path) -> None:
    """In the child: the first SIGINT sends everything printed from then on to `log` and unwinds the
    flow as Ctrl-C would (KeyboardInterrupt in the main thread)."""

    def handler(signum, frame):
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # the supervisor sends one; unwinding is not interrupted
        log.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.close(fd)
        raise KeyboardInterrupt

    signal.signal(signal.SIGINT, handler)
