"""A local Ray instance tied to the lifetime of the command that started it.

`ray.init()` without an address starts a head node (GCS, raylet, dashboard and runtime-env agents,
then workers and actors) as children of this process. On a clean exit Ray shuts them down; after a
`kill -9` of the command they live on as orphans (about 1.3 GB for a training run) and the /tmp/ray*
folder stays. So every local instance evr1 starts gets:

- its own temp folder, and a marker in the environment of every process Ray starts (they inherit it
  from the head processes started by `ray.init`),
- a watchdog: a small process in a process group of its own (so a Ctrl-C or a kill of the command's
  group does not reach it) that waits for the command to end (however it ends), then terminates every
  process of the instance and removes the temp folder, and
- the head processes (GCS, raylet, ...) started inside the watchdog's process group, so everything
  they start joins it at birth: an agent the raylet forks a moment before a kill, renamed (its
  environment, marker included, overwritten by the new title) and re-parented to PID 1 before any
  note was taken, is still found by its group.

A process of the instance is one that carries the marker, descends from one, was noted while the
command lived, belongs to the watchdog's process group, or writes its output to a log file in the
instance's temp folder (Ray's workers leave the group with `setpgid`, but not their log files).

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
from collections.abc import Iterator
from contextlib import contextmanager
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
    group = _spawn_watchdog(os.getpid(), marker, temp_dir)
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
            with _head_processes_in_group(group):
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


def _spawn_watchdog(pid: int, marker: str, temp_dir: str) -> int:
    """Start the watchdog as the leader of a new process group (in this session); returns the group."""
    env = {k: v for k, v in os.environ.items() if k != MARKER}
    package_parent = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_parent, env.get("PYTHONPATH")) if p)
    watchdog = subprocess.Popen(
        [sys.executable, "-m", "evr1.cluster.local", str(pid), marker, temp_dir],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        process_group=0, close_fds=True, env=env,
    )
    _watchdogs.append(watchdog)
    return watchdog.pid


@contextmanager
def _head_processes_in_group(group: int) -> Iterator[None]:
    """While `ray.init` runs, start Ray's head processes in process group `group` (the watchdog's).

    Ray starts them through `ray._private.services.ConsolePopen`; without that name (another Ray
    version) nothing changes and the marker, the notes and the temp folder still find them."""
    try:
        from ray._private import services
    except ImportError:
        yield
        return
    original = getattr(services, "ConsolePopen", None)
    if not isinstance(original, type) or not issubclass(original, subprocess.Popen):
        yield
        return

    class GroupedPopen(original):  # type: ignore[misc, valid-type]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            if not kwargs.get("start_new_session") and kwargs.get("process_group") is None:
                kwargs["process_group"] = group
            super().__init__(*args, **kwargs)

    services.ConsolePopen = GroupedPopen
    try:
        yield
    finally:
        services.ConsolePopen = original


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


def _stat_fields(pid: int | str) -> list[bytes]:
    """/proc/PID/stat after the command name: state, ppid, pgrp, session, ... ([] when gone)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return []


def group_members(group: int) -> list[int]:
    """PIDs of the processes in process group `group` (this process excluded)."""
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit() and int(name) != os.getpid():
            fields = _stat_fields(name)
            if len(fields) > 2 and fields[2] == str(group).encode():
                found.append(int(name))
    return found


def log_writers(folder: str) -> list[int]:
    """PIDs of this user's processes (this one excluded) whose standard output or error is a file
    inside `folder`: how Ray starts every process of an instance (its logs live in the temp folder).
    A reader of those logs (`tail -f`) holds them on other descriptors and is not counted."""
    prefix = os.path.realpath(folder).rstrip("/") + "/"
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == os.getpid():
            continue
        for fd in (1, 2):
            try:
                if os.readlink(f"/proc/{name}/fd/{fd}").startswith(prefix):
                    found.append(int(name))
                    break
            except OSError:  # gone, closed, or another user's
                continue
    return found


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


def _all_of_instance(marker: str, temp_dir: str, group: int | None) -> dict[int, str]:
    """PID -> start time of every process of the instance that can be found now (module docstring)."""
    found = instance_processes(marker)
    others = (group_members(group) if group is not None else []) + (log_writers(temp_dir) if temp_dir else [])
    for pid in others:
        if pid not in found and (start := started(pid)):
            found[pid] = start
    return found


def reap(marker: str, temp_dir: str, grace_s: float = GRACE_S, seen: dict[int, str] | None = None,
         group: int | None = None) -> list[int]:
    """SIGTERM, then SIGKILL, every process of the instance; remove its temp folder. Returns the PIDs.

    `group`: the process group the instance's head processes were started in (the watchdog's own).
    The set is collected before each wave and kept: once a parent dies its children are re-parented
    and no longer found through it."""
    time.sleep(grace_s)
    seen = dict(seen or {})
    for sig, wait_s in ((signal.SIGTERM, 3.0), (signal.SIGKILL, 2.0)):
        seen.update(_all_of_instance(marker, temp_dir, group))
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
    for sig in (signal.SIGINT, signal.SIGHUP):  # a Ctrl-C or a closed terminal is for the command, not for us
        signal.signal(sig, signal.SIG_IGN)
    reap(marker, temp_dir, seen=_watch(pid, marker), group=os.getpgid(0) if os.getpgid(0) == os.getpid() else None)


if __name__ == "__main__":
    _main(sys.argv[1:])
