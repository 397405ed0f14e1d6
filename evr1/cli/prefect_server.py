"""Prefect's temporary API server for `evr1 run`, started while the flow process imports.

With no `PREFECT_API_URL`, Prefect starts a temporary ("ephemeral") API server at a flow's first API
call. Its client first imports the server's own modules (the FastAPI app and the database layer,
about 6 s on 2 cores), then runs `uvicorn prefect.server.api.server:create_app` in a subprocess and
waits until it answers (about 8 s), and only then creates the flow run. All of it came after the
flow process's own imports (torch, transformers, Ray: about 10 s), one after the other: 12-16 s of
every `evr1 run` (docs/performance.md, "Prefect's temporary server").

`evr1 run`'s flow process (`cli/interrupt.py`'s child) starts the same command itself, first thing,
so the server comes up on another core while torch imports, and the client never imports the
server's modules. Once Prefect is imported, `adopt_early()` waits for the server and makes it this
process's API, unless Prefect's settings (a profile, `prefect.toml`, `.env`) name a server of their
own or turn temporary servers off: then the early server is stopped and Prefect does what it would
have done. The server lives as long as the flow process (stopped at exit; on Linux it also dies with
it), keeps its lines in `<run folder>/logs/prefect-server.log`, and serves no UI, as Prefect's own
temporary server: flow-run links are left out of lineage tags (`PREFECT_UI_URL` empty), as before.
"""

from __future__ import annotations

import atexit
import importlib.util
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

from evr1.cli.interrupt import STATUS_ENV

PORT_IN_USE = 3  # uvicorn's exit code when it cannot bind its port (another process took it first)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _die_with_parent() -> None:  # pragma: no cover - runs in the forked child before exec
    """Linux: the server gets SIGTERM when the process that started it dies, however it dies."""
    import ctypes

    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


class TemporaryServer:
    """Prefect's own temporary-server command (`SubprocessASGIServer`'s: uvicorn on 127.0.0.1, the
    server's app factory, ephemeral, UI off) in a subprocess this process owns."""

    def __init__(self, log: Path):
        self.log = log
        self.port: int | None = None
        self.process: subprocess.Popen | None = None

    @property
    def api_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/api"

    def launch(self) -> None:
        """Start the server and return at once (the wait is `wait_healthy`'s)."""
        spec = importlib.util.find_spec("prefect")  # its location, without importing it
        if spec is None or spec.origin is None:
            raise RuntimeError("Prefect is not installed in this environment")
        app_dir = Path(spec.origin).parent.parent
        self.port = _free_port()
        self.log.parent.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, "PREFECT_UI_ENABLED": "0", "PREFECT__SERVER_EPHEMERAL": "1",
               "PREFECT__SERVER_FINAL": "1"}
        with open(self.log, "ab") as out:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "uvicorn", "--app-dir", str(app_dir), "--factory",
                 "prefect.server.api.server:create_app", "--host", "127.0.0.1", "--port", str(self.port),
                 "--log-level", "error", "--lifespan", "on"],
                env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                # Only while this process has one thread (the early start): a preexec_fn in a process
                # with threads can deadlock on a lock another thread held at fork.
                preexec_fn=_die_with_parent if sys.platform == "linux" and threading.active_count() == 1 else None)
        atexit.register(self.stop)

    def healthy(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.api_url}/health", timeout=2) as r:
                return r.status == 200
        except (urllib.error.URLError, OSError):
            return False

    def wait_healthy(self, timeout_s: float) -> None:
        """Until the server answers; a port taken in the meantime gets the server started on another.
        RuntimeError, naming the log, when it exits or does not answer within `timeout_s`."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            code = self.process.poll()
            if code == PORT_IN_USE:
                self.launch()
                continue
            if code is not None:
                raise RuntimeError(f"Prefect's temporary API server exited with code {code} before it answered; "
                                   f"its log: {self.log}")
            if self.healthy():
                return
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"Prefect's temporary API server did not answer within {timeout_s:.0f} s "
                           f"(PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS); its log: {self.log}")

    def stop(self) -> None:
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        process.terminate()
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


_EARLY: list[TemporaryServer] = []


def start_early(argv: list[str]) -> None:
    """In `evr1 run`'s flow process, before anything heavy is imported: start the server when no
    `PREFECT_API_URL` is in the environment. Elsewhere, or once Prefect is imported, nothing."""
    status = os.environ.get(STATUS_ENV)
    if not status or "run" not in argv or os.environ.get("PREFECT_API_URL") or "prefect" in sys.modules:
        return
    server = TemporaryServer(Path(status).parent / "logs" / "prefect-server.log")
    try:
        server.launch()
    except (OSError, RuntimeError):  # Prefect starts its own, as it would have
        server.stop()
        return
    _EARLY.append(server)


def adopt_early() -> str | None:
    """Once Prefect is imported: wait for the early server and make it this process's API (and its
    subprocesses'); its URL. None, the server stopped, when there is none or Prefect's settings name
    a server of their own or disable temporary servers (Prefect then raises its own error)."""
    if not _EARLY:
        return None
    server = _EARLY.pop()
    from prefect.context import refresh_global_settings_context
    from prefect.settings import (PREFECT_API_URL, PREFECT_SERVER_EPHEMERAL_ENABLED,
                                  PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS)

    if PREFECT_API_URL.value() or not PREFECT_SERVER_EPHEMERAL_ENABLED.value():
        server.stop()
        return None
    server.wait_healthy(float(PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS.value()))
    os.environ["PREFECT_API_URL"] = server.api_url
    os.environ["PREFECT_UI_URL"] = ""  # it serves no UI and stops with the run: no links to it
    refresh_global_settings_context()
    return server.api_url
