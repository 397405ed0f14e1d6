"""Per-item time limits for the families whose scoring can run away (symbolic maths).

Two mechanisms, because a signal cannot interrupt a long C call (sympy evaluating
`10^{10^{10}}` sits in one big-integer multiplication) and only works in the main thread:

* inside a batch pool worker (`guarded()`), a SIGALRM timer stops Python-level runaways cheaply
  and the parent process kills the worker when even that does not return;
* everywhere else, `run_limited` sends the call to a helper process that is killed on timeout.
  The helper is `python -m evr1.rewards._worker`, not a multiprocessing child: it never re-imports
  the caller's main module, so it works the same from a script without a main guard, from
  `python -` and from a notebook. A helper that cannot start raises `RewardHelperError` (never a
  silent 0); one that dies on an item makes that item an error, counted in the batch metrics.
"""

from __future__ import annotations

import atexit
import math
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from multiprocessing.connection import Connection
from typing import Any

DEFAULT_TIMEOUT = 10.0
_GRACE = 2.0  # extra seconds the helper gets before it is killed (its own alarm fires first)
PREPARE_S = 120.0  # the most a set-up (an import) may take in the helper: as long as the helper's start

_timeout: ContextVar[float | None] = ContextVar("evr1_reward_timeout", default=DEFAULT_TIMEOUT)
_guarded: ContextVar[bool] = ContextVar("evr1_reward_guarded", default=False)


def check_timeout(timeout: Any) -> float | None:
    """The one meaning of `timeout` in every family: None is no limit, else a positive finite number
    of seconds. Anything else (negative, zero, NaN, inf, a bool, a string) is a ValueError."""
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
        raise ValueError(f"timeout must be a number of seconds or None (no limit), not {timeout!r}")
    if not math.isfinite(timeout) or timeout <= 0:
        raise ValueError(f"timeout must be a positive, finite number of seconds or None (no limit), not {timeout!r}")
    return float(timeout)


class ItemTimeout(BaseException):
    """Scoring one item took longer than its time limit.

    A BaseException, like KeyboardInterrupt, so that libraries which swallow `Exception`
    (math-verify, latex2sympy) cannot swallow the alarm and keep computing without a limit.
    """


def current_timeout() -> float | None:
    """The time limit (seconds) of the item being scored; None means no limit."""
    return _timeout.get()


@contextmanager
def item_timeout(seconds: float | None) -> Iterator[None]:
    """Set the time limit that `run_limited` and the code sandbox use while scoring one item."""
    token = _timeout.set(check_timeout(seconds))
    try:
        yield
    finally:
        _timeout.reset(token)


@contextmanager
def guarded() -> Iterator[None]:
    """Mark this context as supervised by a parent that kills runaway work (a pool worker)."""
    token = _guarded.set(True)
    try:
        yield
    finally:
        _guarded.reset(token)


def _raise_timeout(signum: int, frame: Any) -> None:
    raise ItemTimeout("item scoring exceeded its time limit")


@contextmanager
def time_limit(seconds: float | None) -> Iterator[None]:
    """Raise `ItemTimeout` in this block after `seconds` (SIGALRM; main thread only, else no-op).

    An enclosing timer is restored afterwards with its remaining time.
    """
    if not seconds or seconds <= 0 or threading.current_thread() is not threading.main_thread():
        yield
        return
    outer_remaining, _ = signal.getitimer(signal.ITIMER_REAL)
    started = time.monotonic()
    previous = signal.signal(signal.SIGALRM, _raise_timeout)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        if outer_remaining > 0:
            left = outer_remaining - (time.monotonic() - started)
            signal.setitimer(signal.ITIMER_REAL, max(left, 1e-3))


class RewardHelperError(RuntimeError):
    """The reward helper process could not be started: scoring cannot work here, so it raises."""


def serve(requests: Any, replies: Any) -> None:
    """Helper process loop: run `fn(*args)` under an alarm (none when `seconds` is None) and send back
    ("ok", value), ("timeout", None) or ("err", text)."""
    conn = replies
    conn.send(("ready", None))
    while True:
        try:
            fn, args, seconds = requests.recv()
        except EOFError:
            return
        try:
            with time_limit(seconds):  # None for a set-up (`_Helper.prepare`): no alarm
                value = fn(*args)
            conn.send(("ok", value))
        except ItemTimeout:
            conn.send(("timeout", None))
        except Exception as exc:  # reported to the caller, who scores the item 0
            conn.send(("err", f"{type(exc).__name__}: {exc}"))


def _run_setup(prepare: Callable[[], Any]) -> None:
    """In the helper: run a set-up and return nothing (what it returns, a module say, need not pickle)."""
    prepare()


class _Helper:
    """One long-lived helper process, restarted after a kill; calls are serialised by a lock."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._proc: subprocess.Popen | None = None
        self._send: Any = None
        self._conn: Any = None
        self._prepared: set[Callable[[], Any]] = set()  # set-ups run in the current helper process

    def _start(self) -> None:
        # A fresh interpreter (never a fork of one that may hold CUDA, Ray or lock state) that
        # imports evr1 from the caller's sys.path and nothing of the caller's main module.
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
        try:
            proc = subprocess.Popen([sys.executable, "-m", "evr1.rewards._worker"], stdin=subprocess.PIPE,
                                    stdout=subprocess.PIPE, env=env, close_fds=True)
        except OSError as exc:
            raise RewardHelperError(f"reward helper could not start ({sys.executable} -m evr1.rewards._worker): "
                                    f"{exc}") from exc
        assert proc.stdin is not None and proc.stdout is not None
        send = Connection(os.dup(proc.stdin.fileno()), readable=False)
        conn = Connection(os.dup(proc.stdout.fileno()), writable=False)
        proc.stdin.close()
        proc.stdout.close()
        try:
            ready = conn.poll(120) and conn.recv()[0] == "ready"
        except (EOFError, OSError):
            ready = False
        if not ready:
            proc.kill()
            proc.wait()
            raise RewardHelperError(f"reward helper ({sys.executable} -m evr1.rewards._worker) did not start "
                                    f"within 120 s (exit status {proc.poll()}); see its stderr above")
        self._proc, self._send, self._conn = proc, send, conn

    def stop(self) -> None:
        if self._proc is not None:
            self._proc.kill()
            self._proc.wait(5)
            self._send.close()
            self._conn.close()
        self._proc = self._send = self._conn = None
        self._prepared = set()

    def _prepare(self, prepare: Callable[[], Any]) -> None:
        """Run the set-up `prepare()` (an import) in the helper once, with no alarm: PREPARE_S at most."""
        try:
            self._send.send((_run_setup, (prepare,), None))
            if not self._conn.poll(PREPARE_S):
                self.stop()
                raise RewardHelperError(f"reward helper: the set-up {prepare.__qualname__} took over {PREPARE_S:.0f} s")
            status, _ = self._conn.recv()
        except (EOFError, BrokenPipeError, ConnectionResetError):
            self.stop()
            raise RuntimeError(f"reward helper died in the set-up {prepare.__qualname__}") from None
        except BaseException:
            self.stop()
            raise
        if status == "ok":  # a failed set-up is not marked: the timed call then reports the same error
            self._prepared.add(prepare)

    def call(self, fn: Callable[..., Any], args: tuple, seconds: float,
             prepare: Callable[[], Any] | None = None) -> Any:
        with self._lock:
            if self._proc is None or self._proc.poll() is not None:
                self.stop()
                self._start()
            if prepare is not None and prepare not in self._prepared:
                self._prepare(prepare)
            try:
                self._send.send((fn, args, seconds))
                if not self._conn.poll(seconds + _GRACE):
                    self.stop()  # stuck in C code that the alarm cannot interrupt
                    raise ItemTimeout(f"{fn.__qualname__} exceeded {seconds} s")
                status, value = self._conn.recv()
            except (EOFError, BrokenPipeError, ConnectionResetError):  # the helper died (e.g. out of memory)
                self.stop()
                raise RuntimeError(f"reward helper died running {fn.__qualname__}") from None
            except BaseException:
                self.stop()  # interrupted mid-call: its late answer must not reach the next caller
                raise
        if status == "ok":
            return value
        if status == "timeout":
            raise ItemTimeout(f"{fn.__qualname__} exceeded {seconds} s")
        raise RuntimeError(value)


_helper = _Helper()
atexit.register(_helper.stop)


def run_limited(fn: Callable[..., Any], *args: Any, prepare: Callable[[], Any] | None = None) -> Any:
    """Run a module-level `fn(*args)` under the current item's time limit; `ItemTimeout` when exceeded.

    In a supervised pool worker the call runs in-process under an alarm; elsewhere it runs in the
    helper process so that even a C-level runaway is stopped. With no limit it runs directly.
    `prepare` (module-level, no arguments: an import behind `lru_cache`) is `fn`'s set-up in the helper:
    it runs once per helper process before the first timed call, with no alarm (up to PREPARE_S), so
    that a slow import is not charged to an item. In-process it is not needed here: the family's own
    `prepare` (`registry.Family`) has run it before the item's limit started.
    """
    seconds = current_timeout()
    if seconds is None or seconds <= 0:
        return fn(*args)
    in_main_thread = threading.current_thread() is threading.main_thread()
    if _guarded.get() and in_main_thread:
        with time_limit(seconds):
            return fn(*args)
    return _helper.call(fn, args, seconds, prepare)


def is_guarded() -> bool:
    """Whether this context is a supervised pool worker's (`guarded()`): `run_limited` runs in-process."""
    return _guarded.get()
