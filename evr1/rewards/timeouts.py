"""Per-item time limits for the families whose scoring can run away (symbolic maths).

Two mechanisms, because a signal cannot interrupt a long C call (sympy evaluating
`10^{10^{10}}` sits in one big-integer multiplication) and only works in the main thread:

* inside a batch pool worker (`guarded()`), a SIGALRM timer stops Python-level runaways cheaply
  and the parent process kills the worker when even that does not return;
* everywhere else, `run_limited` sends the call to a helper process that is killed on timeout.
"""

from __future__ import annotations

import atexit
import multiprocessing as mp
import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

DEFAULT_TIMEOUT = 10.0
_GRACE = 2.0  # extra seconds the helper gets before it is killed (its own alarm fires first)

_timeout: ContextVar[float | None] = ContextVar("evr1_reward_timeout", default=DEFAULT_TIMEOUT)
_guarded: ContextVar[bool] = ContextVar("evr1_reward_guarded", default=False)


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
    token = _timeout.set(seconds)
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


def _helper_main(conn: Any) -> None:
    """Helper process loop: run `fn(*args)` under an alarm and send back ("ok", value) or ("err", text)."""
    conn.send(("ready", None))
    while True:
        try:
            fn, args, seconds = conn.recv()
        except EOFError:
            return
        try:
            with time_limit(seconds):
                value = fn(*args)
            conn.send(("ok", value))
        except ItemTimeout:
            conn.send(("timeout", None))
        except Exception as exc:  # reported to the caller, who scores the item 0
            conn.send(("err", f"{type(exc).__name__}: {exc}"))


class _Helper:
    """One long-lived helper process, restarted after a kill; calls are serialised by a lock."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._proc: Any = None
        self._conn: Any = None

    def _start(self) -> None:
        ctx = mp.get_context("spawn")  # never fork a process that may hold CUDA, Ray or lock state
        parent, child = ctx.Pipe()
        proc = ctx.Process(target=_helper_main, args=(child,), daemon=True, name="evr1-reward-helper")
        proc.start()
        child.close()
        if not parent.poll(120):
            proc.kill()
            raise RuntimeError("reward helper process did not start within 120 s")
        parent.recv()
        self._proc, self._conn = proc, parent

    def stop(self) -> None:
        if self._proc is not None:
            self._proc.kill()
            self._proc.join(5)
            self._conn.close()
        self._proc = self._conn = None

    def call(self, fn: Callable[..., Any], args: tuple, seconds: float) -> Any:
        with self._lock:
            if self._proc is None or not self._proc.is_alive():
                self.stop()
                self._start()
            try:
                self._conn.send((fn, args, seconds))
                if not self._conn.poll(seconds + _GRACE):
                    self.stop()  # stuck in C code that the alarm cannot interrupt
                    raise ItemTimeout(f"{fn.__qualname__} exceeded {seconds} s")
                status, value = self._conn.recv()
            except EOFError:  # the helper died (e.g. out of memory)
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


def run_limited(fn: Callable[..., Any], *args: Any) -> Any:
    """Run a module-level `fn(*args)` under the current item's time limit; `ItemTimeout` when exceeded.

    In a supervised pool worker the call runs in-process under an alarm; elsewhere it runs in the
    helper process so that even a C-level runaway is stopped. With no limit it runs directly.
    """
    seconds = current_timeout()
    if seconds is None or seconds <= 0:
        return fn(*args)
    in_main_thread = threading.current_thread() is threading.main_thread()
    if _guarded.get() and in_main_thread:
        with time_limit(seconds):
            return fn(*args)
    if mp.current_process().daemon:
        # A daemonic process may not start the helper: fall back to the alarm (main thread only).
        with time_limit(seconds if in_main_thread else None):
            return fn(*args)
    return _helper.call(fn, args, seconds)
