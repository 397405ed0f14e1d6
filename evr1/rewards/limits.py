"""Limits per answer, whatever runs beside it: a cgroup each where one is writable, else rlimits that
add up to the budget, and a uid of its own per sandbox when running as root (`sandbox.py` has the
whole picture).
"""

from __future__ import annotations

import fcntl
import itertools
import os
import random
import resource
import tempfile
import time
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

MAX_PROCESSES = 64  # tasks per answer under a cgroup
FALLBACK_PROCESSES = 4  # processes per answer with rlimits only (so that 4 × address space = budget)
CPUS_PER_ANSWER = 1  # CPU bandwidth per answer under a cgroup
CGROUP_ENV = "EVR1_SANDBOX_CGROUPS"  # "0": use the rlimit budget even where a cgroup is writable
_UID_BASE = 1_600_000_000
_UID_SLOTS = 4096


@dataclass(frozen=True)
class CgroupRoot:
    version: int  # 1 or 2
    dirs: tuple[tuple[str, str], ...]  # (controller, folder) pairs; v2: (("", folder),)


def _mountinfo() -> list[tuple[str, str, str, str]]:
    """(root, mount point, fs type, super options) of each mount."""
    rows = []
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return rows
    for line in lines:
        left, _, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if len(fields) >= 5 and len(tail) >= 3:
            rows.append((fields[3], fields[4], tail[0], tail[2]))
    return rows


def _probe(folder: str) -> bool:
    probe = os.path.join(folder, f"evr1-probe-{os.getpid()}-{random.getrandbits(32):08x}")
    try:
        os.mkdir(probe)
        os.rmdir(probe)
    except OSError:
        return False
    return True


@lru_cache(maxsize=4)
def cgroup_root(enabled: str) -> CgroupRoot | None:
    if enabled == "0":
        return None
    try:
        membership = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    paths: dict[str, str] = {}
    for line in membership:
        _, controllers, path = line.split(":", 2)
        for name in controllers.split(",") if controllers else [""]:
            paths[name] = path
    mounts = _mountinfo()
    if "" in paths:  # cgroup v2 with the controllers delegated to our own folder
        for root, point, fstype, _ in mounts:
            if fstype != "cgroup2":
                continue
            rel = paths[""]
            if root != "/" and rel.startswith(root):
                rel = rel[len(root):]
            folder = os.path.normpath(point + "/" + rel)
            try:
                delegated = Path(folder, "cgroup.subtree_control").read_text().split()
            except OSError:
                continue
            if {"memory", "pids"} <= set(delegated) and _probe(folder):
                return CgroupRoot(2, (("", folder),))
    dirs = []
    for controller in ("memory", "pids", "cpu"):
        found = None
        for root, point, fstype, options in mounts:
            if fstype == "cgroup" and controller in options.split(",") and controller in paths:
                rel = paths[controller]
                if root != "/" and rel.startswith(root):
                    rel = rel[len(root):]
                folder = os.path.normpath(point + "/" + rel)
                if _probe(folder):
                    found = folder
                break
        if found is None and controller != "cpu":
            return None
        if found is not None:
            dirs.append((controller, found))
    return CgroupRoot(1, tuple(dirs))


def limits_mechanism() -> str:
    """How each answer's memory, processes and CPU are bounded here (for logs and docs)."""
    root = cgroup_root(os.environ.get(CGROUP_ENV, "1"))
    if root is None:
        return f"rlimits: {FALLBACK_PROCESSES} processes × memory/{FALLBACK_PROCESSES} address space"
    return f"cgroup v{root.version}"


_names = itertools.count()


class Cgroup:
    """One answer's own cgroup (all controllers), created before it starts, removed once empty."""

    def __init__(self, root: CgroupRoot, memory_bytes: int) -> None:
        self.root = root
        name = f"evr1-sandbox-{os.getpid()}-{next(_names)}-{random.getrandbits(32):08x}"
        self.dirs: list[tuple[str, str]] = []
        try:
            for controller, parent in root.dirs:
                folder = os.path.join(parent, name)
                os.mkdir(folder)
                self.dirs.append((controller, folder))
                self._configure(controller, folder, memory_bytes)
        except OSError:
            self.remove()
            raise

    def _configure(self, controller: str, folder: str, memory_bytes: int) -> None:
        def put(file: str, value: str, required: bool = True) -> None:
            try:
                Path(folder, file).write_text(value)
            except OSError:
                if required:
                    raise

        processes = str(MAX_PROCESSES + 4)  # + the bwrap processes around the answer
        if self.root.version == 2:
            put("memory.max", str(memory_bytes))
            put("memory.swap.max", "0", required=False)
            put("pids.max", processes)
            put("cpu.max", f"{100_000 * CPUS_PER_ANSWER} 100000", required=False)
        elif controller == "memory":
            put("memory.limit_in_bytes", str(memory_bytes))
            put("memory.memsw.limit_in_bytes", str(memory_bytes), required=False)
        elif controller == "pids":
            put("pids.max", processes)
        elif controller == "cpu":
            put("cpu.cfs_period_us", "100000", required=False)
            put("cpu.cfs_quota_us", str(100_000 * CPUS_PER_ANSWER), required=False)

    @property
    def procs_files(self) -> list[str]:
        return [os.path.join(folder, "cgroup.procs") for _, folder in self.dirs]

    def peak(self) -> int | None:
        for controller, folder in self.dirs:
            for file in ("memory.peak", "memory.max_usage_in_bytes"):
                if controller in ("", "memory"):
                    try:
                        return int(Path(folder, file).read_text().split()[0])
                    except (OSError, ValueError, IndexError):
                        continue
        return None

    def remove(self) -> None:
        """Wait (briefly) until the killed sandbox's processes are gone, then remove the folders."""
        deadline = time.monotonic() + 5
        for _, folder in reversed(self.dirs):
            while True:
                try:
                    os.rmdir(folder)
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    if time.monotonic() > deadline:
                        break
                    time.sleep(0.005)
        self.dirs = []


class UidSlot:
    """As root: a uid no other sandbox holds now (a locked slot), so rlimits count this sandbox only."""

    def __init__(self) -> None:
        folder = Path(tempfile.gettempdir()) / "evr1-sandbox-uids"
        folder.mkdir(mode=0o700, exist_ok=True)
        start = random.randrange(_UID_SLOTS)
        for step in range(_UID_SLOTS):
            slot = (start + step) % _UID_SLOTS
            fd = os.open(folder / str(slot), os.O_CREAT | os.O_RDWR | os.O_CLOEXEC, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                os.close(fd)
                continue
            self.fd, self.uid = fd, _UID_BASE + slot
            return
        raise RuntimeError(f"all {_UID_SLOTS} sandbox uids are in use")

    def release(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def rlimits_for(timeout: float | None, memory_mb: int, cgroup: bool) -> dict[str, int]:
    processes = MAX_PROCESSES if cgroup else FALLBACK_PROCESSES
    per_process = (memory_mb << 20) if cgroup else (memory_mb << 20) // processes
    return {
        "RLIMIT_CPU": max(1, int(timeout + 1)) if timeout is not None else resource.RLIM_INFINITY,
        "RLIMIT_AS": per_process,
        "RLIMIT_FSIZE": 16 << 20,
        "RLIMIT_NOFILE": 64,
        "RLIMIT_NPROC": processes,
        "RLIMIT_CORE": 0,
    }
