"""Run untrusted Python answers against tests in a locked-down subprocess.

Layers, each cheap: a fresh interpreter in isolated mode (`-I`: no PYTHON* variables, no user
site, no cwd on sys.path) with a minimal environment and a temporary directory as cwd; a private
network namespace (`unshare -rn`) when the kernel allows one; rlimits on CPU time, address space,
file size and core dumps; an audit hook that refuses sockets, subprocesses, forks, signals to
other processes, ctypes and rlimit changes; a wall-clock kill of the whole process group.

The harness reports each passed test on a private copy of stdout, tagged with a random nonce,
and sends the solution's own output to /dev/null, so printing "passed" does not pass a test.
Not a defence against a determined human attacker; it keeps a policy under RL from being paid
for side effects, hangs or network access.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from functools import lru_cache

DEFAULT_MEMORY_MB = 1024

_HARNESS = r"""
import json, os, sys
def _run():
    data = json.loads(sys.stdin.buffer.read())
    out = os.fdopen(os.dup(1), "w", buffering=1)
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    import resource
    cpu, memory = data["cpu"], data["memory"]
    for limit, value in ((resource.RLIMIT_CPU, cpu), (resource.RLIMIT_AS, memory),
                         (resource.RLIMIT_FSIZE, 16 << 20), (resource.RLIMIT_CORE, 0)):
        resource.setrlimit(limit, (value, value))
    blocked = ("socket.", "subprocess.", "os.system", "os.exec", "os.fork", "os.forkpty",
               "os.posix_spawn", "os.spawn", "os.kill", "os.killpg", "ctypes.", "resource.setrlimit",
               "resource.prlimit", "pty.", "sys.remote_exec")
    def hook(event, args):
        if event.startswith(blocked):
            raise PermissionError(event + " is not allowed in the reward sandbox")
    sys.addaudithook(hook)
    nonce, tests = data["nonce"], data["tests"]
    namespace = {"__name__": "__main__"}
    try:
        exec(compile(data["code"], "<solution>", "exec"), namespace)
    except BaseException:
        return
    for index, test in enumerate(tests):
        try:
            exec(compile(test, "<test %d>" % index, "exec"), namespace)
        except BaseException:
            continue
        out.write("%s pass %d\n" % (nonce, index))
_run()
"""


@dataclass(frozen=True)
class SandboxRun:
    """How many tests passed, out of how many, and whether the run hit the wall-clock limit."""

    passed: int
    total: int
    timed_out: bool = False

    @property
    def fraction(self) -> float:
        return self.passed / self.total if self.total else 0.0


@lru_cache(maxsize=1)
def network_namespace_prefix() -> tuple[str, ...]:
    """`("unshare", "-rn")` when this machine lets an unprivileged process drop its network, else ()."""
    unshare = shutil.which("unshare")
    if unshare is None:
        return ()
    try:
        ok = subprocess.run([unshare, "-rn", "true"], capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.SubprocessError):
        ok = False
    return (unshare, "-rn") if ok else ()


def run_python_tests(code: str, tests: list[str], *, timeout: float, memory_mb: int = DEFAULT_MEMORY_MB) -> SandboxRun:
    """Execute `code`, then each test (a Python snippet, e.g. an assert) in the same namespace."""
    nonce = secrets.token_hex(16)
    payload = json.dumps(
        {
            "nonce": nonce,
            "code": code,
            "tests": tests,
            "cpu": max(1, int(timeout + 1)),
            "memory": memory_mb << 20,
        }
    ).encode()
    command = [*network_namespace_prefix(), sys.executable, "-I", "-c", _HARNESS]
    with tempfile.TemporaryDirectory(prefix="evr1-sandbox-") as workdir:
        env = {"PATH": "/usr/bin:/bin", "HOME": workdir, "TMPDIR": workdir, "LANG": "C.UTF-8"}
        proc = subprocess.Popen(
            command,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            cwd=workdir,
            env=env,
            start_new_session=True,
        )
        timed_out = False
        try:
            stdout, _ = proc.communicate(payload, timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            _kill_group(proc)
            stdout, _ = proc.communicate()
        except BaseException:  # e.g. the item's alarm: never leave the child running
            _kill_group(proc)
            proc.communicate()
            raise
    passed = set()
    for line in stdout.decode("utf-8", "replace").splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[0] == nonce and parts[1] == "pass" and parts[2].isdigit():
            passed.add(int(parts[2]))
    return SandboxRun(len(passed & set(range(len(tests)))), len(tests), timed_out)


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        proc.kill()
