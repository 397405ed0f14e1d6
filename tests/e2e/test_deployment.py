"""`prefect deployment run 'train-and-eval/tiny'` against a real Prefect server on 127.0.0.1 with a process
worker, exactly as a user runs it. The test starts the server and the worker itself and stops both."""

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_healthy(url: str, proc: subprocess.Popen, timeout: float = 120) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"prefect server exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(0.5)
    raise TimeoutError(f"{url} not healthy after {timeout} s")


def _stop(proc: subprocess.Popen, sig: int) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, sig)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)


@pytest.mark.e2e
def test_tiny_deployment_runs_on_a_server_and_process_worker(tmp_path):
    port = _free_port()
    env = {
        **os.environ,
        "PREFECT_HOME": str(tmp_path / "prefect"),
        "PREFECT_API_URL": f"http://127.0.0.1:{port}/api",
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "PREFECT_WORKER_QUERY_SECONDS": "1",
        "PREFECT_RUNNER_POLL_FREQUENCY": "1",
        "EVR1_HOME": str(ROOT),
        "PATH": f"{BIN}:{os.environ.get('PATH', '')}",
    }
    prefect = str(BIN / "prefect")
    logs = tmp_path / "logs"
    logs.mkdir()
    server = subprocess.Popen([prefect, "server", "start", "--host", "127.0.0.1", "--port", str(port)], env=env,
                              cwd=ROOT, stdout=(logs / "server.log").open("w"), stderr=subprocess.STDOUT,
                              start_new_session=True)
    worker = None
    try:
        _wait_healthy(f"http://127.0.0.1:{port}/api/health", server)
        run = lambda *args, **kw: subprocess.run([prefect, *args], env=env, cwd=ROOT, capture_output=True,
                                                 text=True, **kw)
        created = run("work-pool", "create", "local", "--type", "process", timeout=120)
        assert created.returncode == 0, created.stdout + created.stderr
        deployed = run("--no-prompt", "deploy", "--name", "tiny", "--name", "nightly-tiny", timeout=300)
        assert deployed.returncode == 0, deployed.stdout + deployed.stderr
        inspected = run("deployment", "inspect", "nightly-eval/nightly-tiny", timeout=120)
        assert inspected.returncode == 0 and "0 3 * * *" in inspected.stdout, inspected.stdout + inspected.stderr
        worker = subprocess.Popen([prefect, "worker", "start", "--pool", "local"], env=env, cwd=ROOT,
                                  stdout=(logs / "worker.log").open("w"), stderr=subprocess.STDOUT,
                                  start_new_session=True)
        overrides = ["data.synth.n=4", "data.synth.heldout=2", "trainer.steps=1", "trainer.warmup_sft_steps=0",
                     "trainer.prompts_per_step=2",
                     "rollout.n=2", "trainer.world_size=1", "rollout.max_new_tokens=4", "eval.max_new_tokens=4",
                     f"run.root={tmp_path / 'runs'}", "run.name=deployed", "cache.workers=0"]
        started = run("deployment", "run", "train-and-eval/tiny", "--params", json.dumps({"overrides": overrides}),
                      "--watch", "--watch-interval", "1", "--watch-timeout", "600", timeout=700)
        worker_log = (logs / "worker.log").read_text()[-4000:]
        assert started.returncode == 0, started.stdout[-3000:] + started.stderr[-3000:] + worker_log
        assert "Completed" in started.stdout
        results = tmp_path / "runs" / "deployed" / "eval"
        files = list(results.glob("*/heldout/results.jsonl"))
        assert len(files) == 1 and len(files[0].read_text().splitlines()) == 2

        # The nightly deployment evaluates the version that run registered, from the same registry.
        registry = f"sqlite:///{tmp_path / 'runs' / 'deployed' / 'mlflow.db'}"
        nightly = ["data.synth.n=4", "data.synth.heldout=2", "eval.max_new_tokens=4", f"run.root={tmp_path / 'runs'}",
                   f"tracking.uri={registry}"]
        started = run("deployment", "run", "nightly-eval/nightly-tiny", "--params", json.dumps({"overrides": nightly}),
                      "--watch", "--watch-interval", "1", "--watch-timeout", "600", timeout=700)
        assert started.returncode == 0 and "Completed" in started.stdout, started.stdout[-3000:] + started.stderr[-3000:]
        files = list((tmp_path / "runs" / "nightly-tiny" / "eval").glob("*/heldout/results.jsonl"))
        assert len(files) == 1 and len(files[0].read_text().splitlines()) == 2
    finally:
        if worker is not None:
            _stop(worker, signal.SIGTERM)
        _stop(server, signal.SIGINT)


def _deployments() -> list[dict]:
    import yaml

    return yaml.safe_load((ROOT / "prefect.yaml").read_text())["deployments"]


def test_every_deployments_config_loads_and_gpu_ones_route_engines_to_ray():
    """Each deployment's config loads as shipped (no hub id in model.path); those on the `gpu` pool ask
    for vLLM on CUDA through a Ray cluster address, never in the flow's own process."""
    from evr1.config import load_config

    for d in _deployments():
        cfg = load_config(ROOT / d["parameters"]["config"], d["parameters"].get("overrides") or [])
        if d["work_pool"]["name"] == "gpu":
            assert cfg.rollout.engine == "vllm" and cfg.trainer.device == "cuda", d["name"]
            assert cfg.orchestration.ray_address, f"{d['name']}: set orchestration.ray_address"
            assert cfg.model.path and cfg.model.path.startswith("/"), d["name"]


def test_a_hub_id_in_model_path_is_refused_at_config_time(tmp_path, monkeypatch):
    from evr1.config import load_config

    with pytest.raises(ValueError, match="hub id.*hf download Qwen/Qwen3-VL-8B-Instruct"):
        load_config(ROOT / "conf" / "nightly.yaml", ["model.path=Qwen/Qwen3-VL-8B-Instruct"])
    (tmp_path / "Qwen" / "Qwen3-VL-8B-Instruct").mkdir(parents=True)
    monkeypatch.chdir(tmp_path)  # the same spelling names a folder here: accepted as one
    cfg = load_config(ROOT / "conf" / "nightly.yaml", ["model.path=Qwen/Qwen3-VL-8B-Instruct"])
    assert cfg.model.path == "Qwen/Qwen3-VL-8B-Instruct"


@pytest.mark.e2e
def test_deploy_all_succeeds_on_a_fresh_server_once_its_pools_exist(tmp_path):
    """The README's steps on a fresh server: create the pools prefect.yaml names, `deploy --all`; every
    deployment is then registered on its pool with its schedule."""
    port = _free_port()
    env = {**os.environ, "PREFECT_HOME": str(tmp_path / "prefect"), "PREFECT_API_URL": f"http://127.0.0.1:{port}/api",
           "PREFECT_SERVER_ANALYTICS_ENABLED": "false", "EVR1_HOME": str(ROOT),
           "PATH": f"{BIN}:{os.environ.get('PATH', '')}"}
    prefect = str(BIN / "prefect")
    server = subprocess.Popen([prefect, "server", "start", "--host", "127.0.0.1", "--port", str(port)], env=env,
                              cwd=ROOT, stdout=(tmp_path / "server.log").open("w"), stderr=subprocess.STDOUT,
                              start_new_session=True)
    try:
        _wait_healthy(f"http://127.0.0.1:{port}/api/health", server)
        run = lambda *args: subprocess.run([prefect, *args], env=env, cwd=ROOT, capture_output=True, text=True,
                                           timeout=300)
        deployments = _deployments()
        for pool in sorted({d["work_pool"]["name"] for d in deployments}):
            created = run("work-pool", "create", pool, "--type", "process")
            assert created.returncode == 0, created.stdout + created.stderr
        deployed = run("--no-prompt", "deploy", "--all")
        assert deployed.returncode == 0, deployed.stdout[-3000:] + deployed.stderr[-3000:]
        for d in deployments:
            flow = d["entrypoint"].rsplit(":", 1)[1].replace("_", "-")
            inspected = run("deployment", "inspect", f"{flow}/{d['name']}")
            assert inspected.returncode == 0, inspected.stdout + inspected.stderr
            assert f"'work_pool_name': '{d['work_pool']['name']}'" in inspected.stdout, inspected.stdout
            for schedule in d.get("schedules") or []:
                assert schedule["cron"] in inspected.stdout, inspected.stdout
    finally:
        _stop(server, signal.SIGINT)
