"""`evr1 run`'s flow process starts Prefect's temporary API server itself, while it imports
(evr1/cli/prefect_server.py): the flow runs on it, it stops with the process (however that ends), a
port taken in the meantime moves it, and Prefect's own settings still win over it."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from evr1.cli import prefect_server
from evr1.cli.interrupt import STATUS_ENV

ROOT = Path(__file__).resolve().parents[2]


def _alive(pid: int) -> bool:
    """True while `pid` runs (a zombie, exited but not yet reaped by its parent, counts as gone)."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _gone_within(pid: int, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not _alive(pid):
            return True
        time.sleep(0.1)
    return False


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """A flow process's environment: the supervisor's status variable, Prefect's home of its own, no API URL."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    env.update({STATUS_ENV: str(tmp_path / "run" / ".evr1-status.json"), "PREFECT_HOME": str(tmp_path / "prefect"),
                "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
                # A fresh home runs every database migration: on a loaded 2-core machine that can take
                # longer than Prefect's default 20 s (its test harness allows 120 s too).
                "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "120",
                "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}, **extra)
    return env


def _child(code: str, env: dict[str, str], **kw) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", code, "run", "conf/tiny.yaml"], env=env, cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)


EARLY = ("import json, sys\n"
         "from evr1.cli import prefect_server\n"
         "prefect_server.start_early(sys.argv[1:])\n"
         "pid = prefect_server._EARLY[0].process.pid if prefect_server._EARLY else None\n"
         "print(json.dumps({'server_pid': pid}), flush=True)\n")


def test_the_flow_runs_on_the_early_server_which_stops_with_the_process(tmp_path):
    code = EARLY + (
        "from prefect import flow\n"
        "from prefect.settings import PREFECT_API_URL, PREFECT_UI_URL\n"
        "url = prefect_server.adopt_early()\n"
        "@flow(name='on-the-early-server')\n"
        "def f():\n"
        "    from prefect.runtime import flow_run\n"
        "    return flow_run.id\n"
        "run_id = f()\n"
        "from prefect.client.orchestration import get_client\n"
        "with get_client(sync_client=True) as c:\n"
        "    seen = str(c.read_flow_run(run_id).state.type.value)\n"
        "    api = str(c.api_url)\n"
        "print(json.dumps({'url': url, 'api_setting': PREFECT_API_URL.value(), 'ui': PREFECT_UI_URL.value(),\n"
        "                  'client_api': api, 'state': seen,\n"
        "                  'server_modules_imported': 'prefect.server.api.server' in sys.modules}))\n")
    p = _child(code, _env(tmp_path))
    out, err = p.communicate(timeout=300)
    assert p.returncode == 0, err[-3000:]
    lines = [json.loads(ln) for ln in out.splitlines() if ln.startswith("{")]
    pid, seen = lines[0]["server_pid"], lines[-1]
    assert pid is not None
    assert seen["url"].startswith("http://127.0.0.1:") and seen["url"].endswith("/api")
    assert seen["api_setting"] == seen["url"] and seen["client_api"].rstrip("/") == seen["url"]
    assert not seen["ui"], "a server that stops with the run gets no UI links"
    assert seen["state"] == "COMPLETED"
    assert not seen["server_modules_imported"], "the client never imports the server's modules"
    assert "Starting temporary server" not in err, "Prefect started a second server of its own"
    assert _gone_within(pid, 10), "the server outlived its flow process"
    assert (tmp_path / "run" / "logs" / "prefect-server.log").is_file()


@pytest.mark.skipif(sys.platform != "linux", reason="PR_SET_PDEATHSIG is Linux's: elsewhere a killed flow process can orphan its server")
def test_a_killed_flow_process_takes_its_server_with_it(tmp_path):
    p = _child(EARLY + "import time; time.sleep(600)\n", _env(tmp_path))
    pid = json.loads(p.stdout.readline())["server_pid"]
    assert pid is not None and _alive(pid)
    p.send_signal(signal.SIGKILL)  # no atexit, no finally: the kernel's parent-death signal stops it
    p.wait(timeout=30)
    try:
        assert _gone_within(pid, 15), "an orphaned Prefect server kept running after its flow process was killed"
    finally:
        if _alive(pid):
            os.kill(pid, signal.SIGKILL)


def test_prefect_settings_that_forbid_a_temporary_server_win(tmp_path):
    """A user who turned temporary servers off (or named a server in a profile) gets Prefect's own
    behaviour: the early server is stopped, the API URL left alone."""
    code = EARLY + (
        "from prefect.settings import PREFECT_API_URL\n"
        "print(json.dumps({'adopted': prefect_server.adopt_early(), 'api': PREFECT_API_URL.value()}))\n")
    p = _child(code, _env(tmp_path, PREFECT_SERVER_EPHEMERAL_ENABLED="false"))
    out, err = p.communicate(timeout=300)
    assert p.returncode == 0, err[-3000:]
    first, last = (json.loads(ln) for ln in (out.splitlines()[0], out.splitlines()[-1]))
    assert first["server_pid"] is not None
    assert last == {"adopted": None, "api": None}
    assert _gone_within(first["server_pid"], 10)


def test_a_port_taken_before_the_server_binds_it_moves_the_server(tmp_path, monkeypatch):
    with socket.socket() as taken:
        taken.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        busy = taken.getsockname()[1]
        ports = iter([busy])
        real = prefect_server._free_port
        monkeypatch.setattr(prefect_server, "_free_port", lambda: next(ports, None) or real())
        monkeypatch.setenv("PREFECT_HOME", str(tmp_path / "prefect"))
        server = prefect_server.TemporaryServer(tmp_path / "prefect-server.log")
        server.launch()
        try:
            assert server.port == busy
            server.wait_healthy(120)
            assert server.port != busy and server.healthy()
        finally:
            server.stop()
    assert server.process is None


@pytest.mark.parametrize("case", ["a run's flow process", "not the flow process", "not `run`", "an API URL is set",
                                  "Prefect imported"])
def test_only_a_run_flow_process_without_an_api_url_starts_one(case, tmp_path, monkeypatch):
    monkeypatch.setenv(STATUS_ENV, str(tmp_path / ".evr1-status.json"))
    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    monkeypatch.delitem(sys.modules, "prefect", raising=False)  # restored afterwards
    argv = ["--debug", "run", "conf/tiny.yaml"]
    if case == "not the flow process":
        monkeypatch.delenv(STATUS_ENV)
    elif case == "not `run`":
        argv = ["eval", "conf/tiny.yaml"]
    elif case == "an API URL is set":
        monkeypatch.setenv("PREFECT_API_URL", "http://127.0.0.1:4200/api")
    elif case == "Prefect imported":
        monkeypatch.setitem(sys.modules, "prefect", object())
    launched = []
    monkeypatch.setattr(prefect_server.TemporaryServer, "launch", lambda self: launched.append(self))
    monkeypatch.setattr(prefect_server, "_EARLY", [])
    prefect_server.start_early(argv)
    if case == "a run's flow process":
        assert len(launched) == 1 and prefect_server._EARLY == launched
        assert launched[0].log == tmp_path / "logs" / "prefect-server.log"
    else:
        assert launched == [] and prefect_server._EARLY == []
        assert prefect_server.adopt_early() is None
