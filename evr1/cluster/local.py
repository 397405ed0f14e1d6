"""A local Ray instance tied to the lifetime of the command that started it.

`ray.init()` without an address starts a head node (GCS, raylet, dashboard and runtime-env agents,
then workers and actors) as children of this process. On a clean exit Ray shuts them down; after a
`kill -9` of the command they live on as orphans (about 1.3 GB for a training run) and the /tmp/ray*
folder stays. So every local instance evr1 starts gets:

- its own temp folder, and a marker in the environment of every process Ray starts (they inherit it
  from the head processes started by `ray.init`), and
- a watchdog: a small process in its own session that waits for the command to end (however it ends),
  then terminates every process carrying the marker and removes the temp folder.

Nothing here is needed for a cluster (`ray.address`): its processes are not ours to stop.
"""

from __future__ import annotations

import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
import warnings
from typing import Any

from evr1.cluster.processes import pid_alive, same_process, started

MARKER = "EVR1_RAY_OWNER"
GRACE_S = 2.0  # after the command ends: time for Ray's own shutdown before the watchdog steps in


def start_local(**init_kwargs: Any) -> str:
    """`ray.init(**init_kwargs)` for a local head node with a temp folder and a watchdog; returns the
    temp folder. The processes of this instance are those whose environment holds the marker."""
    import ray

    # Ray's unix socket paths must stay under ~107 bytes, so its temp dir lives directly under /tmp.
    temp_dir = tempfile.mkdtemp(prefix="ray-", dir="/tmp")
    marker = f"{os.getpid()}-{uuid.uuid4().hex[:12]}"
    _spawn_watchdog(os.getpid(), marker, temp_dir)
    previous = os.environ.get(MARKER)
    os.environ[MARKER] = marker  # inherited by the head processes, and through the raylet by every worker
    # Ray's C++ failure handler turns a SIGTERM into a stack dump and an abort (exit 134), and ray.init
    # replaces the command's SIGTERM handler: keep the command's, so a SIGTERM unwinds cleanly.
    os.environ.setdefault("RAY_DISABLE_FAILURE_SIGNAL_HANDLER", "1")
    main = threading.current_thread() is threading.main_thread()
    on_sigterm = signal.getsignal(signal.SIGTERM) if main else None
    try:
        with warnings.catch_warnings():
            # Ray starts its head processes by fork + exec: Lance's fork-safety warning does not apply.
            warnings.filterwarnings("ignore", message="lance is not fork-safe")
            ray.init(_temp_dir=temp_dir, **init_kwargs)
    finally:
        if previous is None:
            os.environ.pop(MARKER, None)
        else:
            os.environ[MARKER] = previous
        if main and on_sigterm is not None:
            signal.signal(signal.SIGTERM, on_sigterm)
    return temp_dir


_watchdogs: list[subprocess.Popen] = []  # kept referenced: they outlive this process by design


def _spawn_watchdog(pid: int, marker: str, temp_dir: str) -> None:
    env = {k: v for k, v in os.environ.items() if k != MARKER}
    package_parent = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_parent, env.get("PYTHONPATH")) if p)
    _watchdogs.append(subprocess.Popen(
        [sys.executable, "-m", "evr1.cluster.local", str(pid), marker, temp_dir],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        start_new_session=True, close_fds=True, env=env,
    ))


def marked_processes(marker: str) -> list[int]:
    """PIDs of this user's processes whose environment holds `MARKER=marker`."""
    needle = f"{MARKER}={marker}".encode()
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == os.getpid():
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as f:
                if needle in f.read().split(b"\0"):
                    found.append(int(name))
        except OSError:  # gone, or another user's
            continue
    return found


def _watch(pid: int, marker: str, every_s: float = 1.0) -> dict[int, str]:
    """Block until process `pid` has ended, noting the instance's processes every `every_s` seconds.

    The notes matter: Ray's head processes share the command's fate (they die with it), and the
    agents they started are then re-parented and, renamed, carry no readable marker; only a note
    taken while the command lived still names them."""
    seen: dict[int, str] = {}
    try:
        fd = os.pidfd_open(pid)
    except (AttributeError, OSError):
        fd = None
    try:
        while True:
            seen.update(instance_processes(marker))
            if fd is not None:
                if select.select([fd], [], [], every_s)[0]:
                    return seen
            elif not pid_alive(pid):
                return seen
            else:
                time.sleep(every_s)
    finally:
        if fd is not None:
            os.close(fd)


def instance_processes(marker: str) -> dict[int, str]:
    """PID -> start time of every process of the instance: those carrying the marker and all their
    descendants. Descendants count because a process that renames itself (Ray's `ray::DashboardAgent`,
    `ray::RuntimeEnvAgent`, actors) overwrites the memory /proc/PID/environ shows, marker included."""
    import psutil

    found: dict[int, str] = {}
    for pid in marked_processes(marker):
        try:
            root = psutil.Process(pid)
            for proc in (root, *root.children(recursive=True)):
                if start := started(proc.pid):  # "": gone meanwhile
                    found[proc.pid] = start
        except psutil.Error:  # gone meanwhile
            continue
    return found


def reap(marker: str, temp_dir: str, grace_s: float = GRACE_S, seen: dict[int, str] | None = None) -> list[int]:
    """SIGTERM, then SIGKILL, every process of the instance; remove its temp folder. Returns the PIDs.

    The set is collected before each wave and kept: once a parent dies its children are re-parented
    and no longer found through it."""
    time.sleep(grace_s)
    seen = dict(seen or {})
    for sig, wait_s in ((signal.SIGTERM, 3.0), (signal.SIGKILL, 2.0)):
        seen.update(instance_processes(marker))
        left = [pid for pid, start in seen.items() if same_process(pid, start)]
        for pid in left:
            try:
                os.kill(pid, sig)
            except OSError:
                pass
        deadline = time.monotonic() + wait_s
        while left and time.monotonic() < deadline:
            time.sleep(0.1)
            left = [pid for pid in left if pid_alive(pid)]
    shutil.rmtree(temp_dir, ignore_errors=True)
    return sorted(seen)


def _main(argv: list[str]) -> None:
    pid, marker, temp_dir = int(argv[0]), argv[1], argv[2]
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C in the terminal is for the command, not for us
    reap(marker, temp_dir, seen=_watch(pid, marker))


if __name__ == "__main__":
    _main(sys.argv[1:])
