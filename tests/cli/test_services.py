"""`evr1 services up` starts a real Prefect server, a process worker and the MLflow UI on free ports,
with the deployments registered (and says which, with their schedules); `down` leaves none of their
processes behind (checked by pid)."""

import json
import os
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EVR1 = str(Path(sys.executable).parent / "evr1")


def _alive(pid: int) -> bool:
    stat = Path(f"/proc/{pid}/stat")
    try:
        return stat.read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def _get(url: str) -> int:
    with urllib.request.urlopen(url, timeout=10) as r:
        return r.status


@pytest.mark.e2e
def test_services_up_status_down_leaves_no_process(tmp_path):
    state = tmp_path / "services"
    env = {**os.environ, "PREFECT_API_URL": ""}
    up = subprocess.run([EVR1, "services", "up", str(ROOT / "conf/tiny.yaml"), f"run.root={tmp_path / 'runs'}",
                         "--state", str(state)], cwd=ROOT,
                        env=env, capture_output=True, text=True, timeout=600)
    data = json.loads((state / "services.json").read_text()) if (state / "services.json").exists() else {}
    pids = {name: e["pid"] for name, e in data.get("services", {}).items()}
    try:
        assert up.returncode == 0, up.stdout[-3000:] + up.stderr[-3000:]
        assert set(pids) == {"prefect-server", "worker", "mlflow-ui"}
        assert data["urls"]["prefect"] in up.stdout and data["urls"]["mlflow"] in up.stdout
        # it says what it registered, the nightly schedules among them
        said = " ".join(up.stdout.split())
        assert "deployment nightly-eval/nightly-tiny: on a schedule: 0 3 * * * UTC, work pool local" in said, said
        assert "deployment train-and-eval/tiny: run on demand, work pool local" in said, said
        assert _get(data["api"] + "/health") == 200 and _get(data["urls"]["mlflow"] + "/health") == 200
        # the deployments are registered on the server `up` started
        env_api = {**os.environ, "PREFECT_API_URL": data["api"], "PREFECT_HOME": str(state / "prefect")}
        listed = subprocess.run([str(Path(sys.executable).parent / "prefect"), "deployment", "inspect",
                                 "train-and-eval/tiny"], env=env_api, capture_output=True, text=True, timeout=120, cwd=ROOT)
        assert listed.returncode == 0 and "local" in listed.stdout, listed.stdout + listed.stderr
        assert str(tmp_path / "runs" / "tiny" / "mlflow.db") in data["tracking_uri"]
        status = subprocess.run([EVR1, "services", "status", "--state", str(state)], cwd=ROOT, capture_output=True,
                                text=True, timeout=60)
        assert status.stdout.count("running") == 3, status.stdout
        group = {p for pid in pids.values() for p in _group(pid)}
        assert set(pids.values()) <= group
    finally:
        down = subprocess.run([EVR1, "services", "down", "--state", str(state)], cwd=ROOT, capture_output=True,
                              text=True, timeout=120)
    assert down.returncode == 0, down.stdout + down.stderr
    left = [p for p in group if _alive(p)]
    assert not left, f"processes left behind: {left}"
    status = subprocess.run([EVR1, "services", "status", "--state", str(state)], cwd=ROOT, capture_output=True,
                            text=True, timeout=60)
    assert "running" not in status.stdout.replace("nothing", "")


def _group(pgid: int) -> set[int]:
    out = set()
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                if os.getpgid(int(d.name)) == pgid:
                    out.add(int(d.name))
            except (ProcessLookupError, PermissionError):
                pass
    return out
