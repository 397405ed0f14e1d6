"""The programs that run inside the code sandbox, and the wire format between them.

Self-contained but for `_wire.py`: `sandbox.py` sends `_wire.py`'s source and then this one into
each sandbox (where only the interpreter's own prefix is visible) and runs `main()` there.

Three roles (the `role` of the JSON payload read from standard input):

* ``answer``: runs the model's code, then serves calls into it over a pipe pair. It reports
  nothing to anyone: it only answers requests ("call this object with these plain values").
* ``tests``: runs the dataset's tests in a *different* sandbox (another PID namespace and uid)
  that never executes a byte of the answer. Names the answer defines are proxies: calling one
  sends the (plain) arguments to the answer sandbox and gets a plain value, a reference to an
  opaque answer object, or an exception back. Every comparison, `assert`, builtin and
  `check(candidate)` body runs here, with real builtins, on real plain values the decoder built;
  the verdicts go to the scorer over this process's standard output, which the answer sandbox
  has no handle on.
* ``stdio``: runs the answer as a program on a given standard input; the scorer compares what
  it printed with the expected output, which never enters the sandbox.
"""

from __future__ import annotations

import json
import os
import sys

# In the sandbox the program is one file (_wire's source, then this one), and this line is left out.
from evr1.rewards._wire import AnswerGone, Peer, Proxy, WireError, encode, is_plain, receive, send


def _setup(data) -> None:
    """Limits, then (as root) the sandbox's own uid: before any untrusted byte runs."""
    import resource

    if os.getuid() == 0 and data["drop_to"] is not None:
        uid = data["drop_to"]
        os.setgroups([])
        os.setgid(uid)
        os.setuid(uid)
        if os.getuid() == 0 or os.geteuid() == 0:
            raise SystemExit("could not drop root")
    for name, value in data["limits"].items():
        resource.setrlimit(getattr(resource, name), (value, value))


def _devnull_stdin() -> None:
    null = os.open(os.devnull, os.O_RDONLY)
    if null != 0:
        os.dup2(null, 0)
        os.close(null)


def answer_main(data) -> None:
    rfd, wfd = data["fds"]
    _setup(data)
    _devnull_stdin()
    namespace = {"__name__": "__main__"}
    try:
        exec(compile(data["code"], "<solution>", "exec"), namespace)
    except BaseException:
        import traceback

        traceback.print_exc()  # to stderr, which the scorer discards
        raise SystemExit(3)
    import types

    peer = Peer(rfd, wfd)
    exports = {}
    for name, value in list(namespace.items()):
        if name.startswith("__"):
            continue
        if isinstance(value, types.ModuleType):  # the tests' side imports its own copy
            exports[name] = ["m", getattr(value, "__name__", "")]
            continue
        try:
            exports[name] = peer.encode(value)
        except WireError:
            continue
    send(wfd, ["hello", exports])
    peer.serve_forever()


def tests_main(data) -> None:
    import builtins

    rfd, wfd = data["fds"]
    _devnull_stdin()
    report_fd = os.dup(1)
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 1)  # test code that prints (values the answer returned, say) cannot reach the report
    sys.stdout = open(os.devnull, "w")
    _setup(data)

    def report(index, verdict, value=None) -> None:
        os.write(report_fd, (json.dumps([index, verdict, value]) + "\n").encode())

    compiled = []
    for index, (kind, text) in enumerate(data["tests"]):
        try:
            compiled.append(compile(text, "<test %d>" % index, "eval" if kind in ("expr", "truth") else "exec"))
        except BaseException:
            compiled.append(None)
    peer = Peer(rfd, wfd)
    try:
        hello = receive(rfd)
        if type(hello) is not list or len(hello) != 2 or hello[0] != "hello" or type(hello[1]) is not dict:
            raise WireError("bad hello")
        answer = {}
        for name, value in hello[1].items():
            if type(name) is str and type(value) is list and len(value) == 2 and value[0] == "m":
                answer[name] = _import(value[1])
            elif type(name) is str:
                answer[name] = peer.decode(value)
    except (WireError, AnswerGone, OSError):
        for index in range(len(compiled)):
            report(index, "fail")  # the answer did not load: nothing passes
        return
    namespace = {"__name__": "__main__", "__builtins__": builtins}
    for name, value in answer.items():
        if value is not _MISSING and not name.startswith("__") and not hasattr(builtins, name):
            namespace[name] = value  # never shadow a builtin
    for index, ((kind, _), code) in enumerate(zip(data["tests"], compiled)):
        verdict, value = "fail", None
        try:
            if code is None:
                raise SyntaxError("test does not compile")
            if kind == "expr":
                result = eval(code, namespace)
                if is_plain(result):
                    verdict, value = "value", encode(result)
            elif kind == "truth":
                if eval(code, namespace):
                    verdict = "pass"
            else:
                exec(code, namespace)
                if kind == "program":
                    _run_check(namespace, answer, data.get("entry_point"))
                verdict = "pass"
        except BaseException:
            verdict, value = "fail", None
        report(index, verdict, value)


_MISSING = object()


def _import(name):
    """A module the answer imported, imported here from the interpreter's own library (never the answer's files)."""
    import importlib

    if type(name) is not str or not name:
        return _MISSING
    try:
        return importlib.import_module(name)
    except BaseException:
        return _MISSING


def _run_check(namespace, answer, entry_point) -> None:
    """HumanEval style: a program that defines `check(candidate)` and never calls it."""
    if entry_point is not None:
        candidate = answer.get(entry_point)
    else:
        callables = [v for v in answer.values() if isinstance(v, Proxy)]
        candidate = callables[0] if len(callables) == 1 else None
    if not isinstance(candidate, Proxy):
        raise NameError("no entry point to pass to check()")
    namespace["check"](candidate)


def stdio_main(data) -> None:
    fd = os.memfd_create("stdin")
    view = memoryview(data["stdin"].encode())
    while view:
        view = view[os.write(fd, view):]
    os.lseek(fd, 0, os.SEEK_SET)
    if fd != 0:
        os.dup2(fd, 0)
        os.close(fd)
    _setup(data)
    sys.stdin = open(0, "r", closefd=False)
    namespace = {"__name__": "__main__"}
    try:
        exec(compile(data["code"], "<solution>", "exec"), namespace)
    except SystemExit:
        sys.stdout.flush()
        raise
    except BaseException:
        import traceback

        traceback.print_exc()
        sys.stdout.flush()
        os._exit(3)


def main() -> None:
    data = json.loads(sys.stdin.buffer.read())
    os.close(0)
    {"answer": answer_main, "tests": tests_main, "stdio": stdio_main}[data["role"]](data)
    sys.stdout.flush()
