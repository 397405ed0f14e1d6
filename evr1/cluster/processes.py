"""Process identity: whether a pid still names the process it named before, and a process's peak memory.

A pid alone is reused by the kernel; a pid with its start time names one process. The start time is
read as clock ticks since boot (/proc/<pid>/stat field 22), a string, because that is the form stored
in MLflow tags (`evr1.pid_started`) and in `services.json`: keep it so that records written by earlier
versions still compare equal.
"""

from __future__ import annotations

import os
import resource


def pid_alive(pid: int | str) -> bool:
    """Whether a process with this pid exists (one we may not signal counts)."""
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except (PermissionError, ValueError):
        return True
    return True


def started(pid: int | str) -> str:
    """The process's start time in clock ticks since boot, "" when it is gone or unreadable."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[19].decode()
    except (OSError, IndexError):
        return ""


def same_process(pid: int | str, start: str | None) -> bool:
    """`pid` is alive and still names the process first seen with start time `start` (not a reused
    pid). With no recorded start (an old record), liveness alone decides."""
    if not pid_alive(pid):
        return False
    return not start or started(pid) == start


def peak_rss_mb() -> float:
    """This process's peak resident set size in MB (Linux reports ru_maxrss in KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
