"""Run untrusted Python answers against tests in an OS-isolated process; decide the verdict outside.

Isolation (bubblewrap, `bwrap`): new PID, network, IPC, UTS (and, when not root, user)
namespaces; a filesystem view holding only the interpreter's own prefix and the shared libraries,
read-only, plus a size-limited tmpfs working directory (no /etc, no /home, no run folder, no
/bin/sh); the sandbox dies with its parent (`--die-with-parent`) and everything in its PID
namespace dies with it, detached processes included. Inside, a small trusted harness sets rlimits
(CPU time, address space, file size, open files, processes; as host root it first drops to the
`nobody` uid so that the process limit applies) before it runs the answer.

Verdict: each test `assert <expr> == <literal>` (or `<literal> == <expr>`) is split in the parent;
the sandbox only evaluates `<expr>` and prints its value (plain built-in types only), and the parent
compares it with the literal, which never enters the sandbox, so an answer cannot forge a pass by
printing or by reading the harness. Other tests (bare `assert f(x)`, whole test programs) are
reported by the sandbox as passed or failed: they are contained like the rest but a hostile answer
can forge their report; docs/rewards.md says so.

Output is read with a byte cap and a wall-clock deadline; past either, the sandbox is killed, so a
flood costs neither memory nor time. With no bubblewrap, code rewards refuse to run (naming what
is missing) unless unsandboxed code is allowed (`reward.allow_unsandboxed_code`, or the
`EVR1_ALLOW_UNSANDBOXED_CODE=1` environment variable that pool workers inherit).
"""

from __future__ import annotations

import ast
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

DEFAULT_MEMORY_MB = 1024
OUTPUT_CAP = 1 << 20  # bytes of sandbox output read before it is killed
WORKDIR_BYTES = 32 << 20  # size of the writable tmpfs working directory
MAX_PROCESSES = 64
ALLOW_ENV = "EVR1_ALLOW_UNSANDBOXED_CODE"
_NOBODY = 65534
_WORKDIR = "/sandbox"

# The trusted harness: limits first, then the answer, then each test's expression. It reports
# `<index>\t<json>` lines on stdout; the answer's own prints go there too and only make the
# parent see a duplicate (then that test fails).
_HARNESS = r"""
import json, os, resource, sys
data = json.loads(sys.stdin.buffer.read())
os.close(0)
if os.getuid() == 0 and data["drop_to"] is not None:
    os.setgroups([]); os.setgid(data["drop_to"]); os.setuid(data["drop_to"])
    if os.getuid() == 0:
        raise SystemExit("could not drop root")
for name, value in data["limits"].items():
    resource.setrlimit(getattr(resource, name), (value, value))
PLAIN = (int, float, str, bool, type(None), list, tuple, dict, set, frozenset, bytes, complex)
def plain(value, depth=0):
    if depth > 50 or type(value) not in PLAIN:
        return False
    if type(value) in (list, tuple, set, frozenset):
        return all(plain(v, depth + 1) for v in value)
    if type(value) is dict:
        return all(plain(k, depth + 1) and plain(v, depth + 1) for k, v in value.items())
    return True
out = sys.stdout
namespace = {"__name__": "__main__"}
try:
    exec(compile(data["code"], "<solution>", "exec"), namespace)
except BaseException:
    import traceback; traceback.print_exc()  # to stderr, which the parent discards (kept for debugging)
    raise SystemExit(3)
for index, (kind, text) in enumerate(data["tests"]):
    try:
        if kind == "expr":
            value = eval(compile(text, "<test %d>" % index, "eval"), namespace)
            report = repr(value) if plain(value) else None
        else:
            exec(compile(text, "<test %d>" % index, "exec"), namespace)
            report = "ok"
    except BaseException:
        report = None
    out.write("%d\t%s\n" % (index, json.dumps(report)))
    out.flush()
"""


class SandboxUnavailable(RuntimeError):
    """No isolation mechanism on this machine and unsandboxed code was not allowed."""


@dataclass(frozen=True)
class SandboxRun:
    """How many tests passed, out of how many; whether the run hit the wall clock or the output cap."""

    passed: int
    total: int
    timed_out: bool = False
    output_capped: bool = False

    @property
    def fraction(self) -> float:
        return self.passed / self.total if self.total else 0.0


@dataclass(frozen=True)
class _Test:
    kind: str  # "expr": the sandbox evaluates `text` and the parent compares with `expected`; "stmt"
    text: str
    expected: object = None


def split_test(test: str) -> _Test:
    """`assert <expr> == <literal>` → evaluate `<expr>` inside, compare with the literal outside."""
    try:
        tree = ast.parse(test.strip(), mode="exec")
    except (SyntaxError, ValueError):
        return _Test("stmt", test)
    if len(tree.body) == 1 and isinstance(tree.body[0], ast.Assert):
        check = tree.body[0].test
        if isinstance(check, ast.Compare) and len(check.ops) == 1 and isinstance(check.ops[0], ast.Eq):
            for expr, literal in ((check.left, check.comparators[0]), (check.comparators[0], check.left)):
                try:
                    expected = ast.literal_eval(literal)
                except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
                    continue
                return _Test("expr", ast.unparse(expr), expected)
        return _Test("truth", ast.unparse(check))
    return _Test("stmt", test)


def unsandboxed_allowed() -> bool:
    return os.environ.get(ALLOW_ENV, "") == "1"


def allow_unsandboxed(flag: bool) -> None:
    """Apply `reward.allow_unsandboxed_code` to this process and the reward workers it spawns."""
    if flag:
        os.environ[ALLOW_ENV] = "1"
    else:
        os.environ.pop(ALLOW_ENV, None)


@lru_cache(maxsize=1)
def missing_mechanism() -> str | None:
    """None when bubblewrap can build a sandbox here, else what is missing (for the error message)."""
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        return "bubblewrap (`bwrap`) is not installed (Debian/Ubuntu: apt-get install bubblewrap)"
    try:
        probe = subprocess.run([*_bwrap_prefix(bwrap), _interpreter(), "-I", "-S", "-c", "pass"],
                               capture_output=True, timeout=30)
    except (OSError, subprocess.SubprocessError) as exc:
        return f"bubblewrap could not start: {exc}"
    if probe.returncode != 0:
        reason = probe.stderr.decode("utf-8", "replace").strip().splitlines()[-1:] or ["no message"]
        return f"bubblewrap cannot create namespaces here (user namespaces disabled?): {reason[0]}"
    return None


def _interpreter() -> str:
    return os.path.realpath(sys.executable)


def _mounts() -> list[str]:
    """Read-only: the interpreter's prefix and the shared-library folders; nothing else of the host."""
    args: list[str] = []
    prefix = os.path.realpath(sys.base_prefix)
    for folder in ("/usr/lib", "/usr/lib64", "/usr/lib32", "/lib", "/lib64", "/lib32"):
        if os.path.islink(folder):
            args += ["--symlink", os.readlink(folder), folder]
        elif os.path.isdir(folder):
            args += ["--ro-bind", folder, folder]
    if prefix not in ("/usr", "/"):
        # Its parent folders are created traversable (under /root they would copy the host's 0700).
        parents = [str(p) for p in reversed(Path(prefix).parents) if str(p) != "/"]
        for parent in parents:
            args += ["--perms", "0755", "--dir", parent]
        args += ["--ro-bind", prefix, prefix]
    else:  # a system interpreter: its binary only, not the rest of /usr/bin
        args += ["--ro-bind", _interpreter(), _interpreter()]
    return args


def _bwrap_prefix(bwrap: str) -> list[str]:
    root = os.getuid() == 0
    namespaces = ["--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try"]
    if not root:
        namespaces.append("--unshare-user")
    # As host root: no user namespace, so the harness can drop to `nobody` (then the process
    # limit applies; the kernel exempts root from it). Only that capability pair is kept for it.
    caps = ["--cap-drop", "ALL", "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"] if root else []
    return [bwrap, *namespaces, "--die-with-parent", "--new-session", *caps, *_mounts(),
            "--proc", "/proc", "--dev", "/dev", "--size", str(WORKDIR_BYTES), "--tmpfs", _WORKDIR,
            "--chmod", "1777", _WORKDIR, "--chdir", _WORKDIR, "--clearenv",
            "--setenv", "HOME", _WORKDIR, "--setenv", "TMPDIR", _WORKDIR, "--setenv", "LANG", "C.UTF-8", "--"]


def _limits(timeout: float, memory_mb: int) -> dict[str, int]:
    return {
        "RLIMIT_CPU": max(1, int(timeout + 1)),
        "RLIMIT_AS": memory_mb << 20,
        "RLIMIT_FSIZE": 16 << 20,
        "RLIMIT_NOFILE": 64,
        "RLIMIT_NPROC": MAX_PROCESSES,
        "RLIMIT_CORE": 0,
    }


def _command() -> list[str]:
    missing = missing_mechanism()
    if missing is None:
        return [*_bwrap_prefix(shutil.which("bwrap") or "bwrap"), _interpreter(), "-I", "-S", "-c", _HARNESS]
    if not unsandboxed_allowed():
        raise SandboxUnavailable(
            f"code reward refused: no sandbox on this machine ({missing}); install it, or set "
            f"reward.allow_unsandboxed_code=true to run model-written code without isolation"
        )
    return [_interpreter(), "-I", "-S", "-c", _HARNESS]


def run_python_tests(
    code: str, tests: list[str], *, timeout: float, memory_mb: int = DEFAULT_MEMORY_MB, output_cap: int = OUTPUT_CAP
) -> SandboxRun:
    """Execute `code`, then each test in the same namespace, in the sandbox; count the tests that pass."""
    checks = [split_test(t) for t in tests]
    root = os.getuid() == 0
    payload = json.dumps({
        "code": code,
        "tests": [("expr" if c.kind in ("expr", "truth") else "stmt", c.text) for c in checks],
        "limits": _limits(timeout, memory_mb),
        "drop_to": _NOBODY if root else None,
    }).encode()
    output, timed_out, capped = _run(_command(), payload, timeout, output_cap)
    reports: dict[int, list[str]] = {}
    for line in output.decode("utf-8", "replace").splitlines():
        index, _, value = line.partition("\t")
        if index.isdigit():
            reports.setdefault(int(index), []).append(value)
    passed = sum(1 for i, check in enumerate(checks) if _passes(check, reports.get(i, [])))
    return SandboxRun(0 if capped else passed, len(checks), timed_out, capped)  # a flood passes nothing


def _passes(check: _Test, reports: list[str]) -> bool:
    """One report, and it matches: duplicates (the answer printing report lines) fail the test."""
    if len(reports) != 1:
        return False
    try:
        reported = json.loads(reports[0])
    except ValueError:
        return False
    if check.kind == "stmt":
        return reported == "ok"
    if not isinstance(reported, str):
        return False
    try:
        value = ast.literal_eval(reported)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return False
    if check.kind == "truth":
        return bool(value)
    return _same(value, check.expected)


def _same(value: object, expected: object) -> bool:
    """Equal as plain values; numbers compare by value (1 == 1.0) but a bool never equals a number."""
    number = (int, float, complex)
    if isinstance(value, number) and isinstance(expected, number):
        return isinstance(value, bool) == isinstance(expected, bool) and value == expected
    return type(value) is type(expected) and value == expected


def _run(command: list[str], payload: bytes, timeout: float, cap: int) -> tuple[bytes, bool, bool]:
    """Run the sandbox: write `payload` to its stdin, read at most `cap` bytes of stdout by the deadline."""
    deadline = time.monotonic() + timeout
    proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    chunks: list[bytes] = []
    size, timed_out, capped = 0, False, False
    try:
        assert proc.stdin is not None and proc.stdout is not None
        try:
            proc.stdin.write(payload)
            proc.stdin.close()
        except BrokenPipeError:
            pass
        fd = proc.stdout.fileno()
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                timed_out = True
                break
            ready, _, _ = select.select([fd], [], [], left)
            if not ready:
                continue
            chunk = os.read(fd, min(65536, cap + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
            if size > cap:
                capped = True
                break
    finally:
        _kill_group(proc)
        if proc.stdout is not None:
            proc.stdout.close()
        proc.wait()
    return b"".join(chunks)[:cap], timed_out, capped


def _kill_group(proc: subprocess.Popen) -> None:
    """SIGKILL bwrap's session; the sandbox's PID namespace dies with it (init first, then the rest)."""
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        proc.kill()
