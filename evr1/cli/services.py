"""The UIs in one command: a Prefect server, a process worker on the `local` pool, and the MLflow UI.

`up` starts each in its own process group on 127.0.0.1 (free ports unless given), waits until it
answers, creates the work pools and registers the deployments of `prefect.yaml`, and writes what it
started (pid, process start time, port, URL, log file) to `<state>/services.json`. `down` stops
exactly those processes (a pid whose start time differs is someone else's and is left alone) and
everything in their process groups. `status` says which still run. The Prefect database lives in
`<state>/prefect`, so flow runs survive a `down`/`up`.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from evr1.cluster import processes
from evr1.tracking import progress

STATE_FILE = "services.json"
BIN = Path(sys.executable).parent


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def _alive(entry: dict) -> bool:
    return processes.same_process(entry["pid"], entry["started"] or "-")  # "-": an entry without a start is not ours


def _wait(url: str, proc: subprocess.Popen, name: str, log: Path, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            tail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
            raise RuntimeError(f"{name} exited with {proc.returncode} before answering (log {log}):\n{tail}")
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(0.5)
    raise TimeoutError(f"{name}: {url} did not answer within {timeout:.0f} s (log {log})")


def _spawn(name: str, argv: list[str], env: dict, state: Path, cwd: Path) -> tuple[subprocess.Popen, dict]:
    log = state / "logs" / f"{name}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("ab") as out:
        proc = subprocess.Popen(argv, env=env, cwd=cwd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)  # its own group: `down` stops its children too
    return proc, {"pid": proc.pid, "started": processes.started(proc.pid), "log": str(log), "argv": argv}


def read_state(state: Path) -> dict:
    f = state / STATE_FILE
    return json.loads(f.read_text()) if f.exists() else {"services": {}}


def _write_state(state: Path, data: dict) -> None:
    tmp = state / f"{STATE_FILE}.tmp"
    tmp.write_text(json.dumps(data, indent=1))
    tmp.replace(state / STATE_FILE)


def up(state: Path, *, tracking_uri: str, project: Path, host: str = "127.0.0.1", prefect_port: int | None = None,
       mlflow_port: int | None = None, deploy: bool = True, timeout: float = 180.0) -> dict:
    """Start the Prefect server, the worker and the MLflow UI; register the deployments. Returns the
    state written to `<state>/services.json` (its `urls` say where to look)."""
    state = state.resolve()
    state.mkdir(parents=True, exist_ok=True)
    running = {n: e for n, e in read_state(state)["services"].items() if _alive(e)}
    if running:
        raise RuntimeError(f"services already running from {state}: {', '.join(sorted(running))}; "
                           f"`evr1 services down` first")
    prefect_port, mlflow_port = prefect_port or free_port(host), mlflow_port or free_port(host)
    api = f"http://{host}:{prefect_port}/api"
    urls = {"prefect": f"http://{host}:{prefect_port}", "mlflow": f"http://{host}:{mlflow_port}"}
    env = {**os.environ, "PREFECT_HOME": str(state / "prefect"), "PREFECT_API_URL": api,
           "PREFECT_UI_URL": urls["prefect"], "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
           "EVR1_HOME": str(project), "EVR1_MLFLOW_UI_URL": urls["mlflow"],
           "PATH": f"{BIN}:{os.environ.get('PATH', '')}"}
    data = {"services": {}, "urls": urls, "api": api, "tracking_uri": tracking_uri, "project": str(project)}
    prefect, mlflow = str(BIN / "prefect"), str(BIN / "mlflow")
    started: list[subprocess.Popen] = []
    data["deployments"] = deployments(project) if deploy else []
    try:
        # Each step under a status line (`progress.phase`): the first start takes a minute or more.
        proc, entry = _spawn("prefect-server", [prefect, "server", "start", "--host", host, "--port", str(prefect_port)],
                             env, state, project)
        started.append(proc)
        data["services"]["prefect-server"] = {**entry, "url": urls["prefect"]}
        _write_state(state, data)
        proc_ml, entry = _spawn("mlflow-ui", [mlflow, "ui", "--backend-store-uri", tracking_uri, "--host", host,
                                              "--port", str(mlflow_port)], env, state, project)
        started.append(proc_ml)
        data["services"]["mlflow-ui"] = {**entry, "url": urls["mlflow"]}
        _write_state(state, data)
        with progress.phase(f"services: Prefect server starting on {urls['prefect']} (its database, the UI)"):
            _wait(f"{api}/health", proc, "prefect server", Path(data["services"]["prefect-server"]["log"]), timeout)
        with progress.phase("services: work pools local and gpu (process type)"):
            for pool in ("local", "gpu"):
                _run([prefect, "work-pool", "create", pool, "--type", "process", "--overwrite"], env, project, state)
        if deploy:
            names = ", ".join(d["name"] for d in data["deployments"])
            with progress.phase(f"services: registering the deployments of prefect.yaml ({names})"):
                _run([prefect, "--no-prompt", "deploy", "--all"], env, project, state)
        proc_w, entry = _spawn("worker", [prefect, "worker", "start", "--pool", "local"], env, state, project)
        started.append(proc_w)
        data["services"]["worker"] = entry
        _write_state(state, data)
        with progress.phase(f"services: MLflow UI starting on {urls['mlflow']}"):
            _wait(f"{urls['mlflow']}/health", proc_ml, "mlflow ui", Path(data["services"]["mlflow-ui"]["log"]), timeout)
    except BaseException:
        down(state)
        raise
    return data


def deployments(project: Path) -> list[dict]:
    """The deployments `prefect deploy --all` registers from `<project>/prefect.yaml`: name, flow
    entrypoint, work pool and schedules (cron with time zone), what `services up` says it set up."""
    import yaml

    f = project / "prefect.yaml"
    if not f.is_file():
        return []
    out = []
    for d in (yaml.safe_load(f.read_text()) or {}).get("deployments") or []:
        crons = [f"{s['cron']} {s.get('timezone', 'UTC')}" for s in d.get("schedules") or [] if s.get("cron")]
        out.append({"name": d.get("name", "?"), "entrypoint": d.get("entrypoint", ""),
                    "pool": (d.get("work_pool") or {}).get("name", ""), "schedules": crons})
    return out


def _run(argv: list[str], env: dict, cwd: Path, state: Path) -> None:
    done = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True, timeout=600)
    with (state / "logs" / "setup.log").open("a") as log:
        log.write(f"$ {' '.join(argv)}\n{done.stdout}{done.stderr}\n")
    if done.returncode != 0:
        raise RuntimeError(f"`{' '.join(argv[1:])}` failed ({done.returncode}): {(done.stdout + done.stderr)[-1500:]}")


def _group(pgid: int) -> list[int]:
    """The pids in process group `pgid` (children a service spawned, e.g. the worker's flow runs)."""
    pids = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                if os.getpgid(int(d.name)) == pgid:
                    pids.append(int(d.name))
            except (ProcessLookupError, PermissionError):
                continue
    return pids


def down(state: Path, *, grace: float = 20.0) -> dict[str, list[int]]:
    """Stop what `up` started (worker first, then the UIs): SIGTERM to each process group, SIGKILL after
    `grace` seconds. Returns service → the pids stopped. Forgets the state's pids afterwards."""
    state = state.resolve()
    data = read_state(state)
    stopped: dict[str, list[int]] = {}
    order = ["worker", "mlflow-ui", "prefect-server"]
    for name in sorted(data["services"], key=lambda n: order.index(n) if n in order else -1):
        entry = data["services"][name]
        if not _alive(entry):
            continue
        pids = _group(entry["pid"])
        os.killpg(entry["pid"], signal.SIGINT if name == "prefect-server" else signal.SIGTERM)
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline and any(_exists(p) for p in pids):
            time.sleep(0.2)
        if any(_exists(p) for p in pids):
            os.killpg(entry["pid"], signal.SIGKILL)
        stopped[name] = pids
    data["services"] = {}
    if (state / STATE_FILE).exists():
        _write_state(state, data)
    return stopped


def _exists(pid: int) -> bool:
    """Whether the process runs: it exists and is not a zombie."""
    if not processes.pid_alive(pid):
        return False
    try:  # a zombie of ours is gone for every purpose: reap it
        return os.waitpid(pid, os.WNOHANG) == (0, 0)
    except ChildProcessError:
        try:
            return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
        except (OSError, IndexError):
            return False


def status(state: Path) -> dict[str, dict]:
    """Service → its entry with `running` set (from `<state>/services.json`)."""
    data = read_state(state.resolve())
    return {name: {**entry, "running": _alive(entry)} for name, entry in data["services"].items()}
