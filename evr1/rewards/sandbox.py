"""Run untrusted Python answers against tests; decide every verdict where the answer cannot reach.

Isolation (bubblewrap, `bwrap`): new PID, network, IPC, UTS (and, when not root, user)
namespaces; a filesystem view holding only the interpreter's own prefix and the shared libraries,
read-only, plus a size-limited tmpfs working directory (no /etc, no /home, no run folder, no
/bin/sh); the sandbox dies with its parent (`--die-with-parent`) and everything in its PID
namespace dies with it, detached processes included.

Verdicts (see `_harness.py`): the answer runs in one sandbox, the tests in another that never
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

import ast
import builtins
import fcntl
import itertools
import json
import os
import random
import resource
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from evr1.rewards import _harness
from evr1.rewards.timeouts import RewardHelperError, check_timeout

DEFAULT_MEMORY_MB = 1024  # for the whole answer: all its processes together
OUTPUT_CAP = 1 << 20  # bytes of sandbox output read before it is killed
WORKDIR_BYTES = 32 << 20  # size of the writable tmpfs working directory
MAX_PROCESSES = 64  # tasks per answer under a cgroup
FALLBACK_PROCESSES = 4  # processes per answer with rlimits only (so that 4 × address space = budget)
CPUS_PER_ANSWER = 1  # CPU bandwidth per answer under a cgroup
ALLOW_ENV = "EVR1_ALLOW_UNSANDBOXED_CODE"
UNJUDGEABLE_ENV = "EVR1_ALLOW_UNJUDGEABLE_TESTS"
CGROUP_ENV = "EVR1_SANDBOX_CGROUPS"  # "0": use the rlimit budget even where a cgroup is writable
_UID_BASE = 1_600_000_000
_UID_SLOTS = 4096
_WORKDIR = "/sandbox"
_HARNESS = Path(_harness.__file__).read_text() + "\nmain()\n"


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


@dataclass(frozen=True)
class _Test:
    kind: str  # "expr": the tests' sandbox reports `text`'s value, the scorer compares it with `expected`;
    text: str  # "truth": an assert's condition; "stmt": statements; "program": defines check(), not called
    expected: object = None


def _calls_check(tree: ast.Module) -> bool:
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        for sub in ast.walk(node):
            if isinstance(sub, ast.Call) and isinstance(sub.func, ast.Name) and sub.func.id == "check":
                return True
    return False


def _defines_check(tree: ast.Module) -> bool:
    return any(isinstance(n, ast.FunctionDef) and n.name == "check" for n in tree.body)


def split_test(test: str) -> _Test:
    """`assert <expr> == <literal>` → evaluate `<expr>` in the tests' sandbox, compare with the literal here."""
    try:
        tree = ast.parse(test.strip(), mode="exec")
    except (SyntaxError, ValueError, MemoryError, RecursionError):
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
    if _defines_check(tree) and not _calls_check(tree):
        return _Test("program", test)
    return _Test("stmt", test)


# ---- the test forms of a sample, for ingestion ------------------------------------------------


@dataclass(frozen=True)
class TestForm:
    """What kind of tests a code sample has and whether they give a trustworthy verdict.

    `form`: "none" (no tests: the identifier rule), "literal asserts", "bare asserts",
    "comparisons", "program", "stdio", "mixed" (several of the assert forms), "invalid".
    `judgeable` False means no verdict can be trusted (`reason` says why): such a sample should be
    rejected at ingestion; the code reward scores it only with `allow_unjudgeable_tests(True)`.
    """

    form: str
    judgeable: bool
    reason: str | None = None


def stdio_cases(tests: Any) -> list[tuple[str, str]] | None:
    """Stdin/stdout cases from `[{"input", "output"}, …]` or `{"inputs": […], "outputs": […]}`; else None."""
    if isinstance(tests, Mapping) and "inputs" in tests and "outputs" in tests:
        inputs, outputs = tests["inputs"], tests["outputs"]
        if isinstance(inputs, list) and isinstance(outputs, list) and len(inputs) == len(outputs):
            tests = [{"input": i, "output": o} for i, o in zip(inputs, outputs, strict=True)]
        else:
            return None
    if not isinstance(tests, (list, tuple)) or not tests or not all(isinstance(t, Mapping) for t in tests):
        return None
    cases = []
    for case in tests:
        given = case.get("input", case.get("stdin"))
        wanted = case.get("output", case.get("expected_output", case.get("stdout")))
        if not isinstance(given, str) or not isinstance(wanted, str):
            return None
        cases.append((given, wanted))
    return cases


def _free_names(trees: list[ast.Module]) -> set[str]:
    loaded: set[str] = set()
    bound: set[str] = set()
    for tree in trees:
        for node in ast.walk(tree):
            if isinstance(node, ast.Name):
                (loaded if isinstance(node.ctx, ast.Load) else bound).add(node.id)
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                bound.add(node.name)
            elif isinstance(node, ast.arg):
                bound.add(node.arg)
            elif isinstance(node, ast.alias):
                bound.add((node.asname or node.name).split(".")[0])
    return {n for n in loaded - bound if not hasattr(builtins, n)}


def classify_tests(sample: Mapping[str, Any]) -> TestForm:
    """Classify a code sample's `tests` (and `entry_point`); ingestion rejects `judgeable=False`."""
    tests = sample.get("tests")
    if tests is None or (isinstance(tests, (str, list, tuple)) and not tests):
        return TestForm("none", True)
    if isinstance(tests, str):
        tests = [tests]
    cases = stdio_cases(tests)
    if cases is not None:
        return TestForm("stdio", True)
    if not isinstance(tests, (list, tuple)) or not all(isinstance(t, str) for t in tests):
        return TestForm("invalid", False, "tests must be strings (asserts or a test program) or "
                                          "stdin/stdout cases {'input': str, 'output': str}")
    tests = [t for t in tests if t.strip()]
    if not tests:
        return TestForm("none", True)
    trees, kinds = [], set()
    for index, text in enumerate(tests):
        try:
            trees.append(ast.parse(text.strip()))
        except (SyntaxError, ValueError, MemoryError, RecursionError) as exc:
            return TestForm("invalid", False, f"test {index} does not parse: {exc}")
        kinds.add(split_test(text).kind)
    entry = sample.get("entry_point")
    if entry is not None and (not isinstance(entry, str) or not entry.isidentifier()):
        return TestForm("invalid", False, f"entry_point {entry!r} is not a Python name")
    if isinstance(entry, str) and hasattr(builtins, entry):
        return TestForm("invalid", False, f"entry_point {entry!r} is a builtin, which the tests always use "
                                          "instead of the answer's")
    if "program" in kinds and entry is None:
        return TestForm("program", False, "the test program defines check(candidate) but never calls it, and "
                                          "the sample has no entry_point to pass to it")
    if "program" not in kinds and not _free_names(trees):
        return TestForm("invalid", False, "the tests never use a name the answer defines (any answer passes)")
    if "program" in kinds or "stmt" in kinds:
        form = "program"
    elif kinds == {"expr"}:
        form = "literal asserts"
    elif kinds == {"truth"}:
        bare = all(not isinstance(t.body[0].test, ast.Compare) for t in trees)  # type: ignore[attr-defined]
        form = "bare asserts" if bare else "comparisons"
    else:
        form = "mixed"
    return TestForm(form, True)


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


# ---- limits per answer -------------------------------------------------------------------------


@dataclass(frozen=True)
class _CgroupRoot:
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
def _cgroup_root(enabled: str) -> _CgroupRoot | None:
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
                return _CgroupRoot(2, (("", folder),))
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
    return _CgroupRoot(1, tuple(dirs))


def limits_mechanism() -> str:
    """How each answer's memory, processes and CPU are bounded here (for logs and docs)."""
    root = _cgroup_root(os.environ.get(CGROUP_ENV, "1"))
    if root is None:
        return f"rlimits: {FALLBACK_PROCESSES} processes × memory/{FALLBACK_PROCESSES} address space"
    return f"cgroup v{root.version}"


_names = itertools.count()


class _Cgroup:
    """One answer's own cgroup (all controllers), created before it starts, removed once empty."""

    def __init__(self, root: _CgroupRoot, memory_bytes: int) -> None:
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


class _UidSlot:
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


def _limits(timeout: float | None, memory_mb: int, cgroup: bool) -> dict[str, int]:
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
        root = _cgroup_root(os.environ.get(CGROUP_ENV, "1"))
        self.cgroup: _Cgroup | None = None
        self.slot: _UidSlot | None = None
        self.proc: subprocess.Popen | None = None
        try:
            if root is not None:
                self.cgroup = _Cgroup(root, memory_mb << 20)
                command = [shutil.which("sh") or "/bin/sh", "-c", _JOIN, "evr1-join", *self.cgroup.procs_files,
                           "--", *command]
            if os.getuid() == 0:
                self.slot = _UidSlot()
            data = {**payload, "role": role, "limits": _limits(timeout, memory_mb, self.cgroup is not None),
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


def _passes(check: _Test, reports: list[Any]) -> bool:
    """Exactly one report for the test, and it is a pass (or, for `expr`, the expected value)."""
    if len(reports) != 1:
        return False
    verdict, value = reports[0]
    if check.kind != "expr":
        return verdict == "pass"
    if verdict != "value":
        return False
    try:
        reported = _harness.decode(value)
    except (_harness.WireError, RecursionError):
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
