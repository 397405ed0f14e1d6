"""The code-reward sandbox against the attacks of issue 15, one test each; afterwards the file
system and the process table are checked for anything the answer left behind.

Needs bubblewrap (`bwrap`, installed by `make install` / the Dockerfile); without it these tests
check the refusal instead."""

from __future__ import annotations

import os
import time
from pathlib import Path

import psutil
import pytest

from evr1.rewards import sandbox
from evr1.rewards.sandbox import SandboxUnavailable, run_python_tests

# `make install` installs bubblewrap (as root). Under CI these tests never skip: without it they run
# and fail, so a missing install step shows. A developer's machine without it skips them, saying why.
_MISSING = sandbox.missing_mechanism()
needs_bwrap = pytest.mark.skipif(_MISSING is not None and not os.environ.get("CI"),
                                 reason=f"code sandbox unavailable here: {_MISSING}")

ADD = "def add(a, b):\n    return a + b\n"
TESTS = ["assert add(1, 2) == 3", "assert add(-1, 1) == 0", "assert add(2, 2) == 5"]


def _attack(tmp_path: Path, body: str, tests: list[str]) -> sandbox.SandboxRun:
    """Run `body` (the answer) with `tests`; `tmp_path` stands in for the run folder it should not see."""
    return run_python_tests(body.replace("RUN", str(tmp_path)), tests, timeout=10)


def _children() -> set[int]:
    """This process's descendants plus any process anywhere running the sandbox harness (an orphan)."""
    mine = {p.pid for p in psutil.Process().children(recursive=True)}
    for p in psutil.process_iter(["cmdline"]):
        if any('data["drop_to"]' in part for part in p.info["cmdline"] or ()):
            mine.add(p.pid)
    return mine


@pytest.fixture
def host(tmp_path):
    """A run folder with a secret, and the process table before; both checked after the attack."""
    (tmp_path / "secret.txt").write_text("secret")
    before = _children()
    yield tmp_path
    assert sorted(p.name for p in tmp_path.iterdir()) == ["secret.txt"]
    assert (tmp_path / "secret.txt").read_text() == "secret"
    time.sleep(0.3)
    left = _children() - before
    assert not left, f"sandbox processes outlived the scorer: {left}"
    assert not list(Path("/tmp").glob("evr1-escaped*"))


@needs_bwrap
def test_correct_answer_scores_and_wrong_tests_fail():
    run = run_python_tests(ADD, TESTS, timeout=10)
    assert (run.passed, run.total, run.timed_out) == (2, 3, False)


@needs_bwrap
def test_cannot_read_host_files(host):
    code = (
        "def probe(path):\n"
        "    try:\n"
        "        return open(path).read()[:20]\n"
        "    except OSError:\n"
        "        return 'denied'\n"
    )
    run = _attack(host, code, ["assert probe('/etc/passwd') == 'denied'", "assert probe('RUN/secret.txt') == 'denied'",
                                f"assert probe('{Path.home()}/.bashrc') == 'denied'"])
    assert run.passed == 3


@needs_bwrap
def test_cannot_write_fill_or_delete_outside_workdir(host):
    code = (
        "import os\n"
        "def attempt(action):\n"
        "    try:\n"
        "        action()\n"
        "        return 'done'\n"
        "    except OSError:\n"
        "        return 'denied'\n"
        "def fill():\n"
        "    with open('big', 'wb') as f:\n"
        "        for _ in range(1024):\n"
        "            f.write(b'x' * (1 << 20))\n"
    )
    tests = [
        "assert attempt(lambda: open('RUN/new.txt', 'w').write('x')) == 'denied'",
        "assert attempt(lambda: os.remove('RUN/secret.txt')) == 'denied'",
        "assert attempt(lambda: open('/tmp/evr1-escaped', 'w').write('x')) == 'denied'",
        "assert attempt(lambda: open('inside.txt', 'w').write('ok')) == 'done'",  # the workdir is writable
        "assert attempt(fill) == 'denied'",  # 1 GiB: the file-size limit / the small tmpfs stop it
    ]
    assert _attack(host, code, tests).passed == 5


@needs_bwrap
def test_posixsubprocess_fork_exec_finds_no_shell(host):
    # The call (CPython 3.11's signature) starts a shell on the host; in the sandbox there is none.
    code = (
        "import _posixsubprocess, os\n"
        "def shell():\n"
        "    try:\n"
        "        r, w = os.pipe()\n"
        "        pid = _posixsubprocess.fork_exec([b'/bin/sh', b'-c', b'echo escaped > RUN/shell.txt'], [b'/bin/sh'],\n"
        "            True, (w,), None, None, -1, -1, -1, -1, -1, -1, r, w, True, False, -1, None, None, None, -1,\n"
        "            None, False)\n"
        "        return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])\n"  # 0 when the shell ran
        "    except OSError:\n"
        "        return 'denied'\n"
    )
    run = _attack(host, code, ["assert (shell() == 0) == False"])
    assert run.passed == 1


@needs_bwrap
def test_no_audit_hook_to_switch_off_and_os_system_stays_inside(host):
    # The old in-process audit hook could be disabled through its closure cell; there is none now,
    # and os.system has no shell to run and no host folder to write to.
    code = "import os, sys\nstatus = os.system('echo escaped > RUN/system.txt')\n"
    run = _attack(host, code, ["assert (status != 0) == True", "assert os.path.exists('RUN') == False"])
    assert run.passed == 2
    assert not (host / "system.txt").exists()


@needs_bwrap
def test_cannot_signal_the_scorer(host):
    code = (
        f"import os, signal\n"
        f"def kill():\n"
        f"    try:\n"
        f"        os.kill({os.getpid()}, signal.SIGKILL)\n"
        f"        return 'sent'\n"
        f"    except OSError:\n"
        f"        return 'denied'\n"
        f"def parent():\n"
        f"    try:\n"
        f"        os.kill(os.getppid(), signal.SIGKILL)\n"
        f"    except OSError:\n"
        f"        pass\n"
        f"    return 'survived'\n"
    )
    run = _attack(host, code, ["assert kill() == 'denied'", "assert parent() == 'survived'"])
    assert run.passed == 2  # the scorer's pid is not in the sandbox's PID namespace; its init ignores it
    assert psutil.pid_exists(os.getpid())


@needs_bwrap
def test_detached_process_dies_with_the_sandbox(host):
    code = (
        "import os, time\n"
        "if os.fork() == 0:\n"
        "    os.setsid()\n"
        "    if os.fork() == 0:\n"
        "        time.sleep(2)\n"
        "        open('/tmp/evr1-escaped-late', 'w').write('late')\n"
        "        open('RUN/late.txt', 'w').write('late')\n"
        "    os._exit(0)\n"
    )
    run = _attack(host, code, ["assert 1 == 1"])
    assert run.passed == 1
    time.sleep(3)  # past the moment the detached grandchild would write


@needs_bwrap
def test_forged_pass_lines_do_not_pass(host):
    # A wrong answer that prints report lines itself (and reads its caller's frame): each test's
    # expected value stays in the parent, so the forgery can only duplicate reports, which fail.
    code = (
        "import sys\n"
        "def add(a, b):\n"
        "    return a - b\n"  # wrong for all three tests (it returned 0 here, which add(-1, 1) == 0 accepts)
        "for i in range(3):\n"
        "    print('%d\\t\"3\"' % i)\n"
        "    print('%d\\t\"ok\"' % i)\n"
        "frame = sys._getframe(0)\n"
    )
    run = _attack(host, code, TESTS)
    assert run.passed == 0


@needs_bwrap
def test_output_flood_is_capped_and_returns_on_time(host):
    code = "import sys\nchunk = 'x' * (1 << 20)\nfor _ in range(1500):\n    sys.stdout.write(chunk)\n"
    rss_before = psutil.Process().memory_info().rss
    started = time.monotonic()
    run = run_python_tests(code, ["assert 1 == 1"], timeout=5)
    elapsed = time.monotonic() - started
    assert run.output_capped and run.passed == 0
    assert elapsed < 5 + 5  # generous: the issue saw 17.7 s for a 5 s limit
    assert psutil.Process().memory_info().rss - rss_before < 64 << 20


@needs_bwrap
def test_fork_bomb_hits_the_process_limit(host):
    code = (
        "import os, time\n"
        "def bomb():\n"
        "    started = 0\n"
        "    try:\n"
        "        for _ in range(500):\n"
        "            if os.fork() == 0:\n"
        "                time.sleep(30)\n"
        "                os._exit(0)\n"
        "            started += 1\n"
        "    except OSError:\n"
        "        return started < 500\n"
        "    return False\n"
    )
    assert _attack(host, code, ["assert bomb() == True"]).passed == 1  # and the fixture sees none left


@needs_bwrap
def test_silent_hang_returns_on_time(host):
    started = time.monotonic()
    run = run_python_tests("import time\ntime.sleep(60)\n", ["assert 1 == 1"], timeout=1.5)
    assert run.timed_out and time.monotonic() - started < 1.5 + 5


@needs_bwrap
def test_no_network():
    code = (
        "import socket\n"
        "def connect():\n"
        "    try:\n"
        "        socket.create_connection(('1.1.1.1', 53), timeout=2)\n"
        "        return 'connected'\n"
        "    except OSError:\n"
        "        return 'denied'\n"
    )
    assert run_python_tests(code, ["assert connect() == 'denied'"], timeout=10).passed == 1


def test_refuses_without_mechanism(monkeypatch, tmp_path):
    # A machine without bubblewrap (an empty PATH here): refused, naming the mechanism, unless allowed.
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv(sandbox.ALLOW_ENV, raising=False)
    sandbox.missing_mechanism.cache_clear()
    with pytest.raises(SandboxUnavailable, match="bwrap.*allow_unsandboxed_code"):
        run_python_tests(ADD, TESTS, timeout=10)
    sandbox.allow_unsandboxed(True)
    try:
        assert run_python_tests(ADD, TESTS, timeout=10).passed == 2
    finally:
        sandbox.allow_unsandboxed(False)
        monkeypatch.undo()
        sandbox.missing_mechanism.cache_clear()


@pytest.mark.parametrize(
    ("test", "kind", "expected"),
    [
        ("assert add(1, 2) == 3", "expr", 3),
        ("assert [1, 2] == f(x)", "expr", [1, 2]),
        ("assert f(x)", "truth", None),
        ("assert f(x) == g(y)", "truth", None),
        ("x = 1\nassert x", "stmt", None),
    ],
)
def test_split_keeps_the_expected_value_outside(test, kind, expected):
    check = sandbox.split_test(test)
    assert (check.kind, check.expected) == (kind, expected)
