"""Run untrusted Python answers against tests; decide every verdict where the answer cannot reach.

Isolation (bubblewrap, `bwrap`): new PID, network, IPC, UTS (and, when not root, user)
namespaces; a filesystem view holding only the interpreter's own prefix and the shared libraries,
read-only, plus a size-limited tmpfs working directory (no /etc, no /home, no run folder, no
/bin/sh); the sandbox dies with its parent (`--die-with-parent`) and everything in its PID
namespace dies with it, detached processes included.

Verdicts (see `_harness.py` and `_wire.py`): the answer runs in one sandbox, the tests in another that never
executes the answer's code. Calls from the tests into the answer cross a pipe pair as plain values
(or references to opaque answer objects, which have no truth value and equal only themselves),
so every comparison, `assert`, builtin and `check(candidate)` body runs with real builtins in a
process the answer cannot see, signal, trace or write to. The tests' sandbox reports on its own
standard output, which only the scorer reads. For `assert <expr> == <literal>` the literal never
enters either sandbox: the tests' side reports the value and the scorer compares. Stdin/stdout
problems run the answer as a program on each input in a fresh sandbox; the scorer compares what it
printed with the expected output, which never enters the sandbox.

Limits per answer, whatever runs beside it (`limits_mechanism()` says which applies here):

* with a writable cgroup (v2 with the memory and pids controllers delegated, or v1 memory + pids
  hierarchies) every sandbox gets its own cgroup: memory (swap included) = `memory_mb` for the whole
  answer, `MAX_PROCESSES` tasks, one CPU of bandwidth; rlimits stay as a second layer;
* otherwise rlimits that add up: `FALLBACK_PROCESSES` processes (threads included) of
  `memory_mb / FALLBACK_PROCESSES` address space each.

As root each sandbox runs under a uid of its own (a locked slot from `_UID_BASE`), so the process
limit counts only its processes; not as root each sandbox has its own user namespace, whose
process count the kernel keeps apart. Output is read with a byte cap and a wall-clock deadline;
past either, the sandbox is killed, so a flood costs neither memory nor time. With no bubblewrap,
code rewards refuse to run (naming what is missing) unless unsandboxed code is allowed
(`reward.allow_unsandboxed_code`, or `EVR1_ALLOW_UNSANDBOXED_CODE=1`, which pool workers inherit).
"""

from __future__ import annotations

import json
import os
import select
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from evr1.rewards import _harness, _wire
from evr1.rewards.code_tests import (SplitTest, TestForm, classify_tests, split_test,  # noqa: F401 (re-exported)
                                     stdio_cases)
from evr1.rewards.limits import (CGROUP_ENV, FALLBACK_PROCESSES, MAX_PROCESSES, Cgroup, UidSlot,  # noqa: F401
                                 cgroup_root, limits_mechanism, rlimits_for)
from evr1.rewards.timeouts import RewardHelperError, check_timeout

DEFAULT_MEMORY_MB = 1024  # for the whole answer: all its processes together
OUTPUT_CAP = 1 << 20  # bytes of sandbox output read before it is killed
WORKDIR_BYTES = 32 << 20  # size of the writable tmpfs working directory
ALLOW_ENV = "EVR1_ALLOW_UNSANDBOXED_CODE"
UNJUDGEABLE_ENV = "EVR1_ALLOW_UNJUDGEABLE_TESTS"
_WORKDIR = "/sandbox"


def _program() -> str:
    """The sandbox's program as one file: the wire, then the roles (less their import of the wire and
    a second `from __future__`), then `main()`."""
    wire = Path(_wire.__file__).read_text()
    roles = [line for line in Path(_harness.__file__).read_text().splitlines()
             if not line.startswith(("from __future__", "from evr1.rewards._wire import"))]
    return wire + "\n" + "\n".join(roles) + "\nmain()\n"


_HARNESS = _program()


class SandboxUnavailable(RewardHelperError):
    """No isolation mechanism on this machine and unsandboxed code was not allowed.

    A `RewardHelperError`: code cannot be scored on this machine, so `compute_score` and
    `compute_scores` raise it instead of scoring every code item 0."""


class UnjudgeableTests(ValueError):
    """A sample's tests cannot give a trustworthy verdict (see `classify_tests`)."""


@dataclass(frozen=True)
class SandboxRun:
    """How many tests passed, out of how many; whether the run hit the wall clock or the output cap.

    `peak_memory`: the answer sandbox's peak memory in bytes where a cgroup measured it, else None.
    """

    passed: int
    total: int
    timed_out: bool = False
    output_capped: bool = False
    peak_memory: int | None = None

    @property
    def fraction(self) -> float:
        return self.passed / self.total if self.total else 0.0


def unjudgeable_allowed() -> bool:
    return os.environ.get(UNJUDGEABLE_ENV, "") == "1"


def allow_unjudgeable_tests(flag: bool) -> None:
    """Score samples whose tests `classify_tests` calls unjudgeable (this process and its workers)."""
    if flag:
        os.environ[UNJUDGEABLE_ENV] = "1"
    else:
        os.environ.pop(UNJUDGEABLE_ENV, None)


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


# The cgroup is joined by the launcher itself, before bubblewrap starts, so no process of the
# sandbox ever runs outside it.
_JOIN = 'while [ "$1" != -- ]; do echo $$ > "$1" || exit 97; shift; done; shift; exec "$@"'


class _Box:
    """One sandboxed harness process: its uid slot, its cgroup, its pipes; `close` kills and cleans up."""

    def __init__(self, role: str, payload: dict, *, timeout: float | None, memory_mb: int,
                 pass_fds: tuple[int, ...] = ()) -> None:
        command = _command()
        root = cgroup_root(os.environ.get(CGROUP_ENV, "1"))
        self.cgroup: Cgroup | None = None
        self.slot: UidSlot | None = None
        self.proc: subprocess.Popen | None = None
        try:
            if root is not None:
                self.cgroup = Cgroup(root, memory_mb << 20)
                command = [shutil.which("sh") or "/bin/sh", "-c", _JOIN, "evr1-join", *self.cgroup.procs_files,
                           "--", *command]
            if os.getuid() == 0:
                self.slot = UidSlot()
            data = {**payload, "role": role, "limits": rlimits_for(timeout, memory_mb, self.cgroup is not None),
                    "drop_to": self.slot.uid if self.slot else None}
            self.payload = json.dumps(data).encode()
            self.proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                         stderr=None if os.environ.get("EVR1_SANDBOX_DEBUG") else subprocess.DEVNULL,
                                         start_new_session=True, pass_fds=pass_fds)
        except BaseException:
            self.close()
            raise
        self.output = bytearray()
        self.seen = 0
        self.open = True

    def send_payload(self) -> None:
        assert self.proc is not None and self.proc.stdin is not None
        try:
            self.proc.stdin.write(self.payload)
            self.proc.stdin.close()
        except BrokenPipeError:
            pass

    def close(self) -> int | None:
        """Kill the sandbox (its PID namespace dies with bwrap), reap it, free its cgroup and uid."""
        peak = None
        if self.proc is not None:
            if self.proc.poll() is None:
                try:
                    os.killpg(self.proc.pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    self.proc.kill()
            for stream in (self.proc.stdin, self.proc.stdout):
                if stream is not None:
                    try:
                        stream.close()
                    except OSError:
                        pass
            self.proc.wait()
            self.proc = None
        if self.cgroup is not None:
            peak = self.cgroup.peak()
            self.cgroup.remove()
            self.cgroup = None
        if self.slot is not None:
            self.slot.release()
            self.slot = None
        return peak


def _drive(boxes: list[_Box], main: _Box, deadline: float | None, cap: int) -> tuple[bool, bool]:
    """Feed the payloads, then read every box's output until `main` closes its output.

    Returns (timed_out, capped). Output beyond `cap` bytes from any box stops the run."""
    for box in boxes:
        box.send_payload()
    fds = {box.proc.stdout.fileno(): box for box in boxes if box.proc and box.proc.stdout}
    while main.open:
        left = None if deadline is None else deadline - time.monotonic()
        if left is not None and left <= 0:
            return True, False
        ready, _, _ = select.select(list(fds), [], [], left)
        for fd in ready:
            box = fds[fd]
            chunk = os.read(fd, 65536)
            if not chunk:
                box.open = False
                del fds[fd]
                continue
            box.seen += len(chunk)
            if box.seen > cap:
                return False, True
            if box is main:
                box.output += chunk  # the answer's own prints (another box) are counted, not kept
    return False, False


# ---- running tests -------------------------------------------------------------------------------


def run_python_tests(
    code: str,
    tests: Sequence[str],
    *,
    timeout: float | None,
    memory_mb: int = DEFAULT_MEMORY_MB,
    output_cap: int = OUTPUT_CAP,
    entry_point: str | None = None,
) -> SandboxRun:
    """Run `code` in one sandbox and `tests` (asserts or test programs) in another; count the passes.

    `timeout` bounds the whole run in seconds (None: no limit); `memory_mb` bounds the answer's
    processes together; `entry_point` names the function a `check(candidate)` program receives."""
    timeout = check_timeout(timeout)
    checks = [split_test(t) for t in tests]
    deadline = None if timeout is None else time.monotonic() + timeout
    to_answer = os.pipe()  # tests → answer
    to_tests = os.pipe()  # answer → tests
    boxes: list[_Box] = []
    peak = None
    try:
        answer = _Box("answer", {"code": code, "fds": [to_answer[0], to_tests[1]]}, timeout=timeout,
                      memory_mb=memory_mb, pass_fds=(to_answer[0], to_tests[1]))
        boxes.append(answer)
        runner = _Box("tests", {"tests": [(c.kind, c.text) for c in checks], "entry_point": entry_point,
                                "fds": [to_tests[0], to_answer[1]]},
                      timeout=timeout, memory_mb=memory_mb, pass_fds=(to_tests[0], to_answer[1]))
        boxes.append(runner)
        for fd in (*to_answer, *to_tests):
            os.close(fd)
        to_answer = to_tests = ()
        timed_out, capped = _drive(boxes, runner, deadline, output_cap)
        reports = bytes(runner.output)
    finally:
        for fd in (*to_answer, *to_tests):
            os.close(fd)
        for box in boxes:
            measured = box.close()
            if box is boxes[0]:
                peak = measured
    verdicts: dict[int, list[Any]] = {}
    for line in reports.decode("utf-8", "replace").splitlines():
        try:
            index, verdict, value = json.loads(line)
        except (ValueError, TypeError):
            continue
        if isinstance(index, int) and not isinstance(index, bool):
            verdicts.setdefault(index, []).append((verdict, value))
    passed = sum(1 for i, check in enumerate(checks) if _passes(check, verdicts.get(i, [])))
    return SandboxRun(0 if capped else passed, len(checks), timed_out, capped, peak)  # a flood passes nothing


def _passes(check: SplitTest, reports: list[Any]) -> bool:
    """Exactly one report for the test, and it is a pass (or, for `expr`, the expected value)."""
    if len(reports) != 1:
        return False
    verdict, value = reports[0]
    if check.kind != "expr":
        return verdict == "pass"
    if verdict != "value":
        return False
    try:
        reported = _wire.decode(value)
    except (_wire.WireError, RecursionError):
        return False
    return _same(reported, check.expected)


def _same(value: object, expected: object) -> bool:
    """Equal as plain values; numbers compare by value (1 == 1.0) but a bool never equals a number."""
    number = (int, float, complex)
    if isinstance(value, number) and isinstance(expected, number):
        return isinstance(value, bool) == isinstance(expected, bool) and value == expected
    if type(value) is not type(expected):
        return False
    if isinstance(value, (list, tuple)):
        return len(value) == len(expected) and all(_same(a, b) for a, b in zip(value, expected))  # type: ignore[arg-type]
    if isinstance(value, dict):
        return value.keys() == expected.keys() and all(_same(value[k], expected[k]) for k in value)  # type: ignore[attr-defined]
    return value == expected


def _lines(text: str) -> list[str]:
    lines = [line.rstrip() for line in text.replace("\r\n", "\n").split("\n")]
    while lines and not lines[-1]:
        lines.pop()
    return lines


def run_stdio_tests(
    code: str,
    cases: Sequence[tuple[str, str]],
    *,
    timeout: float | None,
    memory_mb: int = DEFAULT_MEMORY_MB,
    output_cap: int = OUTPUT_CAP,
) -> SandboxRun:
    """Run `code` as a program once per (stdin, expected stdout) case, each in a fresh sandbox.

    A case passes when the program exits with status 0 and its output equals the expected one,
    line by line, ignoring trailing spaces and trailing empty lines; the expected output never
    enters the sandbox. `timeout` bounds all cases together."""
    timeout = check_timeout(timeout)
    deadline = None if timeout is None else time.monotonic() + timeout
    passed, timed_out, capped, peak = 0, False, False, None
    for given, wanted in cases:
        box = _Box("stdio", {"code": code, "stdin": given}, timeout=timeout, memory_mb=memory_mb)
        try:
            timed_out, capped = _drive([box], box, deadline, output_cap)
            status = None
            if not (timed_out or capped) and box.proc is not None:
                try:
                    left = None if deadline is None else max(0.0, deadline - time.monotonic())
                    status = box.proc.wait(left)
                except subprocess.TimeoutExpired:
                    timed_out = True
            output = bytes(box.output)
        finally:
            measured = box.close()
            peak = measured if peak is None or (measured or 0) > peak else peak
        if timed_out or capped:
            break
        if status == 0 and _lines(output.decode("utf-8", "replace")) == _lines(wanted):
            passed += 1
    return SandboxRun(0 if capped else passed, len(cases), timed_out, capped, peak)
