"""`evr1 cache` killed with -9 at several points (right after start, the moment Ray's raylet has started
an agent, during the build): 10 s after each kill no process of the command is left: none it ever started
(recorded every 20 ms while it ran), none carrying its marker, none in its watchdog's process group,
none writing to its Ray temp folder; the watchdog is gone too and has removed that folder.

The points run one after another; each kill's 10 s check overlaps the next command's start-up."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest

from evr1.cluster.local import MARKER, group_members, log_writers, reap

ROOT = Path(__file__).resolve().parents[2]
AFTER_KILL_S = 10.0


def _overrides(run_root: Path, point: str) -> list[str]:
    return [f"run.root={run_root}", f"run.name={point}", "data.synth.n=8", "data.synth.heldout=2",
            "cache.workers=1", "cache.timeout_s=60"]


class Watched:
    """A running `evr1 cache` and everything it starts, recorded until it is killed."""

    def __init__(self, run_root: Path, point: str) -> None:
        cmd = [sys.executable, "-m", "evr1.cli", "cache", str(ROOT / "conf/tiny.yaml"), *_overrides(run_root, point)]
        self.log = run_root / f"{point}.log"
        self.proc = subprocess.Popen(cmd, cwd=ROOT, stdout=open(self.log, "w"), stderr=subprocess.STDOUT,
                                     env={**os.environ, "EVR1_DEBUG": "1"})
        self.point = point
        self.seen: dict[int, float] = {self.proc.pid: psutil.Process(self.proc.pid).create_time()}
        self.names: set[str] = set()
        self.watchdog: tuple[int, str] | None = None  # pid, temp folder

    def poll(self) -> None:
        try:
            children = psutil.Process(self.proc.pid).children(recursive=True)
        except psutil.Error:
            return
        for child in children:
            try:
                self.seen.setdefault(child.pid, child.create_time())
                self.names.add(child.name())
                cmd = child.cmdline()
                if "evr1.cluster.local" in cmd and self.watchdog is None:
                    self.watchdog = (child.pid, cmd[-1])
            except psutil.Error:
                continue

    def run_until(self, ready, timeout: float = 150.0) -> None:
        deadline = time.monotonic() + timeout
        while not ready(self):
            assert self.proc.poll() is None, f"evr1 cache ended before the kill point {self.point}: " \
                                             f"{self.log.read_text()[-2000:]}"
            assert time.monotonic() < deadline, f"kill point {self.point} not reached in {timeout} s"
            self.poll()
            time.sleep(0.02)
        self.poll()

    def kill(self) -> float:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()
        return time.monotonic()

    def left(self) -> dict[int, str]:
        """Processes of this command still alive (zombies waiting for their parent's wait() do not count)."""
        def alive(pid: int, created: float | None = None) -> bool:
            try:
                p = psutil.Process(pid)
                return p.status() != psutil.STATUS_ZOMBIE and (created is None or p.create_time() == created)
            except psutil.Error:
                return False

        found = {pid for pid, created in self.seen.items() if pid != self.proc.pid and alive(pid, created)}
        prefix = f"{MARKER}={self.proc.pid}-".encode()
        for p in psutil.process_iter():
            try:
                with open(f"/proc/{p.pid}/environ", "rb") as f:
                    if any(v.startswith(prefix) for v in f.read().split(b"\0")):
                        found.add(p.pid)
            except OSError:
                continue
        if self.watchdog is not None:
            found |= {p for p in group_members(self.watchdog[0]) + log_writers(self.watchdog[1]) if alive(p)}
        out = {}
        for pid in found:
            try:
                out[pid] = " ".join(psutil.Process(pid).cmdline())[:100] or psutil.Process(pid).name()
            except psutil.Error:
                continue
        return out


def _started(*names: str):
    return lambda w: any(name in w.names for name in names)


POINTS = {
    "start": lambda w: time.monotonic() - w.t0 > 0.5,  # imports, nothing of Ray yet
    # Ray starting: the raylet has just forked an agent, which renames itself (its marker unreadable)
    # and, its parent killed with the command, is re-parented before the watchdog's next note.
    "agents": _started("ray::DashboardAgent", "ray::RuntimeEnvAgent"),
    "build": _started("ray::decode_fragment"),  # a decode task is running
}


@pytest.mark.e2e
@pytest.mark.slow
def test_no_process_of_a_killed_cache_command_survives_10_s(tmp_path):
    checks: list[threading.Thread] = []
    failures: list[str] = []

    def check_later(w: Watched, killed_at: float) -> None:
        time.sleep(max(0.0, killed_at + AFTER_KILL_S - time.monotonic()))
        left = w.left()
        if left:
            failures.append(f"{w.point}: alive {AFTER_KILL_S} s after the kill: {left}")
        if w.watchdog is not None and os.path.exists(w.watchdog[1]):
            failures.append(f"{w.point}: Ray temp folder {w.watchdog[1]} not removed")

    for point, ready in POINTS.items():
        w = Watched(tmp_path, point)
        w.t0 = time.monotonic()
        w.run_until(ready)
        if point != "start":
            assert w.watchdog is not None, f"{point}: no watchdog seen ({sorted(w.names)})"
        killed_at = w.kill()
        checks.append(threading.Thread(target=check_later, args=(w, killed_at)))
        checks[-1].start()
    for t in checks:
        t.join()
    assert not failures, "\n".join(failures)


def _orphan(**popen) -> int:
    """A `sleep` whose parent has exited (re-parented, as a Ray agent is after its raylet dies), without
    the marker in its environment (as a renamed agent shows none); returns its pid."""
    env = {k: v for k, v in os.environ.items() if k != MARKER}
    out_file = popen.pop("out")
    out = subprocess.run(["sh", "-c", f"sleep 300 >'{out_file}' 2>&1 & echo $!"], env=env, capture_output=True,
                         text=True, check=True, **popen)
    return int(out.stdout)


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_reap_finds_orphans_without_marker_or_parent_by_group_and_log_file(tmp_path):
    """What the watchdog relies on when no note names a process: the process group the head processes
    were started in, and the Ray temp folder the process writes its output to."""
    temp_dir = tmp_path / "ray-x"
    temp_dir.mkdir()
    leader = subprocess.Popen(["sleep", "300"], process_group=0)
    try:
        in_group = _orphan(process_group=leader.pid, out=os.devnull)
        writer = _orphan(out=temp_dir / "worker.out")  # left the group (a Ray worker does), logs into the folder
        assert in_group in group_members(leader.pid) and writer in log_writers(str(temp_dir))
        assert writer not in group_members(leader.pid) and in_group not in log_writers(str(temp_dir))
        reaped = reap("no-such-marker", str(temp_dir), grace_s=0, group=leader.pid)
        leader.wait(timeout=10)
        assert {leader.pid, in_group, writer} <= set(reaped)
        assert _gone(in_group) and _gone(writer) and not temp_dir.exists()
    finally:
        leader.kill()
