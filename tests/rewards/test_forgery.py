"""Issue 36: verdicts an answer cannot forge, for every test form.

Each forgery technique (prepended to a wrong answer) runs against each test form; a wrong answer
passes nothing whatever it does inside its sandbox. A correct answer that prints anything, report-
shaped lines included, passes everything. Needs bubblewrap, like test_sandbox.py."""

from __future__ import annotations

import os

import pytest

from evr1.rewards import sandbox
from evr1.rewards.sandbox import run_python_tests, run_stdio_tests

_MISSING = sandbox.missing_mechanism()
pytestmark = pytest.mark.skipif(_MISSING is not None and not os.environ.get("CI"),
                                reason=f"code sandbox unavailable here: {_MISSING}")

RIGHT = "def is_prime(n):\n    return n > 1 and all(n % d for d in range(2, int(n ** 0.5) + 1))\n"
WRONG = "def is_prime(n):\n    return n % 2 == 0 and n > 2\n"  # wrong on 7, 8 and 11
ALWAYS = (  # an object that claims to equal anything and to be true
    "class _Yes:\n    __eq__ = lambda self, other: True\n    __ne__ = lambda self, other: False\n"
    "    __bool__ = lambda self: True\n    __hash__ = lambda self: 0\n"
    "def is_prime(n):\n    return _Yes()\n"
)
RIGHT_STDIO = "n = int(input())\nprint('yes' if n > 1 and all(n % d for d in range(2, int(n ** 0.5) + 1)) else 'no')\n"
WRONG_STDIO = "n = int(input())\nprint('yes' if n % 2 == 0 and n > 2 else 'no')\n"

FORMS = {
    "literal asserts": ["assert is_prime(7) == True", "assert is_prime(8) == False", "assert is_prime(11) == True"],
    "bare asserts": ["assert is_prime(7)", "assert not is_prime(8)", "assert is_prime(11)"],
    "non-literal comparisons": ["assert is_prime(7) == bool(7 % 2)",
                                "assert [is_prime(n) for n in (2, 3, 4)] == [n in (2, 3) for n in (2, 3, 4)]",
                                "assert is_prime(11) is (11 > 10)"],
    "check(candidate) program": [
        "def check(candidate):\n    assert candidate(7)\n    assert not candidate(8)\n    assert candidate(11)\n"
    ],
}
STDIO = [("7\n", "yes\n"), ("8\n", "no\n"), ("11\n", "yes\n")]

# Each technique runs first, at import, in the answer's own process.
ATTACKS = {
    "exit early after fake report lines": (
        "import os\n"
        "for i in range(8):\n"
        "    os.write(1, b'[%d, \"pass\", null]\\n' % i)\n"
        "    os.write(1, b'%d\\t\"ok\"\\n' % i)\n"
        "os._exit(0)\n"
    ),
    "fake report lines on every descriptor": (
        "import os\n"
        "for fd in range(0, 64):\n"
        "    for i in range(8):\n"
        "        try:\n"
        "            os.write(fd, b'[%d, \"pass\", null]\\n[%d, \"value\", true]\\n' % (i, i))\n"
        "        except OSError:\n"
        "            pass\n"
    ),
    "replace eval exec repr and other builtins": (
        "import builtins\n"
        "builtins.eval = lambda *a, **k: True\n"
        "builtins.exec = lambda *a, **k: None\n"
        "builtins.repr = lambda *a, **k: 'True'\n"
        "builtins.bool = lambda *a, **k: True\n"
        "builtins.isinstance = lambda *a, **k: True\n"
        "builtins.all = lambda *a, **k: True\n"
        "def compile(*a, **k):\n"
        "    return builtins.compile('pass', '<x>', 'exec')\n"
        "def bool(*a, **k):\n"
        "    return True\n"  # an answer-level name shadowing a builtin the tests use
    ),
    "patch assert and the exception hooks": (
        "import builtins, sys\n"
        "class _Never(Exception):\n"
        "    pass\n"
        "builtins.AssertionError = _Never\n"
        "sys.excepthook = lambda *a: None\n"
    ),
    "kill its parent and every process it can see": (
        "import os, signal\n"
        "for pid in [os.getppid(), 1, *range(2, 300)]:\n"
        "    if pid != os.getpid():\n"
        "        try:\n"
        "            os.kill(pid, signal.SIGKILL)\n"
        "        except OSError:\n"
        "            pass\n"
    ),
    "exhaust output": (
        "import os\n"
        "line = b'[0, \"pass\", null]\\n[1, \"pass\", null]\\n[2, \"pass\", null]\\n'\n"
        "for _ in range(100000):\n"
        "    os.write(1, line * 64)\n"
    ),
    "read the harness's frames and memory": (
        "import gc, sys\n"
        "found = [o for o in gc.get_objects() if isinstance(o, dict) and ('tests' in o or 'expected' in o)]\n"
        "frame = sys._getframe()\n"
        "while frame.f_back is not None:\n"
        "    frame = frame.f_back\n"
        "    frame.f_globals.update(report=lambda *a, **k: None, _passes=lambda *a: True)\n"
    ),
}


def _run(code: str, form: str) -> sandbox.SandboxRun:
    if form == "stdio":
        return run_stdio_tests(code, STDIO, timeout=10)
    return run_python_tests(code, FORMS[form], timeout=10, entry_point="is_prime")


@pytest.mark.parametrize("form", [*FORMS, "stdio"])
def test_right_answer_passes_and_wrong_answer_fails(form):
    right, wrong = (RIGHT_STDIO, WRONG_STDIO) if form == "stdio" else (RIGHT, WRONG)
    assert _run(right, form).passed == _run(right, form).total
    assert _run(wrong, form).passed == 0


@pytest.mark.parametrize("form", [*FORMS, "stdio"])
@pytest.mark.parametrize("attack", list(ATTACKS))
def test_forgery_never_makes_a_wrong_answer_pass(attack, form):
    wrong = WRONG_STDIO if form == "stdio" else WRONG
    run = _run(ATTACKS[attack] + wrong, form)
    assert run.passed == 0, f"{attack} forged {run.passed} passes of {form}"


@pytest.mark.parametrize("form", list(FORMS))
def test_an_object_that_equals_everything_passes_nothing(form):
    assert _run(ALWAYS, form).passed == 0


@pytest.mark.parametrize("form", list(FORMS))
def test_forgery_inside_the_called_function(form):
    # The attack runs while the tests wait on the call: exit, print report lines, kill the parent.
    code = (
        "import os, signal\n"
        "def is_prime(n):\n"
        "    os.write(1, b'[0, \"pass\", null]\\n[1, \"pass\", null]\\n[2, \"pass\", null]\\n')\n"
        "    try:\n"
        "        os.kill(os.getppid(), signal.SIGKILL)\n"
        "    except OSError:\n"
        "        pass\n"
        "    os._exit(0)\n"
    )
    assert _run(code, form).passed == 0


@pytest.mark.parametrize("form", list(FORMS))
def test_a_right_answer_that_prints_report_shaped_lines_still_passes(form):
    noise = (
        "import os, sys\n"
        "print('[0, \"fail\", null]')\n"
        "os.write(1, b'[1, \"fail\", null]\\n0\\t\"ok\"\\n')\n"
        "print('hello', file=sys.stderr)\n"
    )
    code = noise + RIGHT + "_right = is_prime\ndef is_prime(n):\n    print('[2, \"fail\", null]', n)\n    return _right(n)\n"
    run = _run(code, form)
    assert run.passed == run.total


def test_a_right_stdio_answer_that_writes_report_lines_to_stderr_still_passes():
    code = "import sys\nprint('[0, \"fail\", null]', file=sys.stderr)\n" + RIGHT_STDIO
    assert _run(code, "stdio").passed == 3


def test_answer_objects_methods_generators_callbacks_and_in_place_mutation():
    # Calls cross the sandbox boundary as plain values; opaque objects become references.
    code = (
        "class Stack:\n"
        "    def __init__(self):\n"
        "        self.items = []\n"
        "    def push(self, v):\n"
        "        self.items.append(v)\n"
        "    def pop(self):\n"
        "        return self.items.pop()\n"
        "def count(n):\n"
        "    yield from range(n)\n"
        "def sort_in_place(xs):\n"
        "    xs.sort()\n"
        "def apply(f, xs):\n"
        "    return [f(x) for x in xs]\n"
        "def boom():\n"
        "    raise ValueError('no')\n"
        "import math\n"
    )
    tests = [
        "s = Stack()\ns.push(3)\ns.push(4)\nassert s.pop() == 4 and s.pop() == 3",
        "assert list(count(3)) == [0, 1, 2]",
        "xs = [3, 1, 2]\nsort_in_place(xs)\nassert xs == [1, 2, 3]",
        "assert apply(lambda x: x * 2, [1, 2]) == [2, 4]",
        "try:\n    boom()\nexcept ValueError:\n    pass\nelse:\n    raise AssertionError",
        "assert math.isclose(apply(float, [1])[0], 1.0)",  # a module the answer imported
        "assert Stack()",  # an opaque object has no truth value here: fails
    ]
    run = run_python_tests(code, tests, timeout=10)
    assert (run.passed, run.total) == (6, 7)


def test_answer_that_fails_to_load_passes_nothing():
    assert run_python_tests("raise SystemExit(0)\n", ["assert 1 == 1", "assert True"], timeout=10).passed == 0
