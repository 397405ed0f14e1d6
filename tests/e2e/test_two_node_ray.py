"""More than one node: a two-node Ray cluster on this machine (`ray start --head` and `ray start
--address=…`, each with its own CPUs and a custom resource naming it, on 127.0.0.1), which the cache
build and GRPO training join through `orchestration.ray_address`, exactly as on a real cluster.

The cache build runs one decode task per CPU, one CPU per node, so its tasks must use both nodes. The
training actors (FSDP2 ranks over gloo, the rollout worker) land where Ray's scheduler puts them;
wherever that is, the ranks rendezvous and training finishes. Ray's state API (the head's dashboard)
says where each task and actor ran. The test stops both nodes it started, by their process groups.
"""

from __future__ import annotations

import os
import signal
import socket
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RAY = str(Path(sys.executable).parent / "ray")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start(args: list[str], log: Path) -> subprocess.Popen:
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "disabled"}
    return subprocess.Popen([RAY, "start", "--block", "--disable-usage-stats", "--node-ip-address=127.0.0.1", *args],
                            env=env, stdout=log.open("w"), stderr=subprocess.STDOUT, start_new_session=True)


def _stop(proc: subprocess.Popen) -> None:
    """SIGTERM to the node's process group (its raylet, GCS, workers), SIGKILL if it lingers: only ours."""
    for sig, wait in ((signal.SIGTERM, 30), (signal.SIGKILL, 10)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(wait)
            return
        except subprocess.TimeoutExpired:
            continue


def _wait_nodes(address: str, n: int, procs: list[subprocess.Popen], timeout: float = 120) -> dict[str, str]:
    """{node id: its custom resource name} once `n` nodes are alive (a fresh driver each poll)."""
    import ray

    deadline = time.time() + timeout
    while time.time() < deadline:
        if any(p.poll() is not None for p in procs):
            raise RuntimeError("a `ray start` exited: see head.log / worker.log")
        ray.init(address=address, logging_level="ERROR")
        try:
            alive = {n["NodeID"]: next(r for r in n["Resources"] if r.startswith("node_")) for n in ray.nodes()
                     if n["Alive"] and any(r.startswith("node_") for r in n["Resources"])}
        finally:
            ray.shutdown()
        if len(alive) == n:
            return alive
        time.sleep(1)
    raise TimeoutError(f"{n} Ray nodes not up at {address} after {timeout} s")


@pytest.mark.e2e
@pytest.mark.slow
def test_cache_build_and_training_run_on_a_two_node_cluster(tmp_path):
    import ray
    from ray.util.state import list_actors, list_tasks

    from evr1 import pipeline
    from evr1.config import load_config

    if ray.is_initialized():  # another test's local instance: this test's driver joins the cluster instead
        ray.shutdown()
    port, dash = _free_port(), _free_port()
    address = f"127.0.0.1:{port}"
    # A short session folder of its own: Ray's unix socket paths must stay under 108 characters.
    short = Path(tempfile.mkdtemp(prefix="evr1-ray-", dir="/tmp"))
    head = _start(["--head", f"--port={port}", "--num-cpus=1", "--resources={\"node_head\": 1}",
                   "--include-dashboard=true", f"--dashboard-port={dash}", "--dashboard-host=127.0.0.1",
                   f"--temp-dir={short}"], tmp_path / "head.log")
    worker = None
    try:
        time.sleep(2)
        worker = _start([f"--address={address}", "--num-cpus=1", "--resources={\"node_worker\": 1}"],
                        tmp_path / "worker.log")
        nodes = _wait_nodes(address, 2, [head, worker])

        cfg = load_config(ROOT / "conf" / "tiny.yaml", [
            f"run.root={tmp_path / 'runs'}", "run.name=two-nodes", f"orchestration.ray_address={address}",
            "data.synth.n=6", "data.synth.heldout=1", "data.synth.image_fraction=0", "cache.workers=2",
            "trainer.steps=1", "trainer.warmup_sft_steps=0", "trainer.prompts_per_step=2", "trainer.world_size=2",
            "rollout.n=2", "rollout.max_new_tokens=4", "eval.enabled=false", "tracking.enabled=false"])
        samples = pipeline.stage_ingest(cfg)
        model = pipeline.stage_model(cfg)
        frames = pipeline.stage_cache(cfg, samples, model)
        assert frames.uri and frames.metrics.get("failed", 0) == 0, frames.metrics
        ckpt = pipeline.stage_train(cfg, samples, frames, model)
        assert ckpt.uri and Path(ckpt.uri).exists()
        if ray.is_initialized():
            ray.shutdown()

        decode_nodes = {t.node_id for t in list_tasks(address=address, filters=[("func_or_class_name", "=", "decode_fragment")],
                                                    detail=True, limit=1000) if t.node_id}
        actors = list_actors(address=address, detail=True, limit=1000)
        ranks = [a for a in actors if a.class_name == "PolicyWorker"]
        print({"nodes": nodes, "decode": sorted(nodes[n] for n in decode_nodes),
               "ranks": [nodes.get(a.node_id) for a in ranks],
               "rollout": [nodes.get(a.node_id) for a in actors if a.class_name == "RolloutWorker"]})
        assert decode_nodes == set(nodes), "the cache build's decode tasks did not use both nodes"
        assert len(ranks) == 2 and all(a.node_id in nodes for a in ranks)
    finally:
        if ray.is_initialized():
            ray.shutdown()
        if worker is not None:
            _stop(worker)
        _stop(head)
        shutil.rmtree(short, ignore_errors=True)
