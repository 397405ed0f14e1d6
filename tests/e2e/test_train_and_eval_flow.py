"""The whole DAG on a config even smaller than the demo, with real Prefect, Ray, Lance, MLflow and a tiny
Qwen3-VL: every stage's artifact is checked, not just that the flow returned."""

import json
from pathlib import Path

import lance
import pytest
import torch
from mlflow.tracking import MlflowClient
from transformers import AutoModelForImageTextToText

from evr1.config import load_config
from evr1.train.checkpoint import read_state

ROOT = Path(__file__).resolve().parents[2]

OVERRIDES = [
    "trainer.steps=2", "trainer.warmup_sft_steps=2", "trainer.prompts_per_step=2", "rollout.n=2",
    "trainer.world_size=2", "trainer.save_every=1", "trainer.micro_batch_size=2", "rollout.max_new_tokens=8",
    "eval.max_new_tokens=8",
]


def _dataset_with_bad_records(tmp_path: Path) -> tuple[Path, Path, Path]:
    """8 good synthetic training records plus the four bad inputs of the issue, and 4 held-out records."""
    from evr1.data.synth import make_synthetic

    rep = make_synthetic(tmp_path / "synth", 12, seed=3, heldout=4)
    good = Path(rep.train_path).read_text().splitlines()
    assert len(good) == 8
    bad = [
        '{"problem": "<video>What colour?", "answer": "A", "videos": [',                          # malformed JSON
        json.dumps({"problem": "<video>How many?", "answer": "3", "problem_type": "numerical",
                    "videos": ["videos/does-not-exist.mp4"], "data_type": "video"}),               # missing video
        json.dumps({"problem": "<video>Rate it", "answer": "3", "problem_type": "interpretive dance",
                    "videos": [json.loads(good[0])["videos"][0]], "data_type": "video"}),         # unknown type
        json.dumps({"problem": "<video>Is it red?", "problem_type": "boolean",
                    "videos": [json.loads(good[0])["videos"][0]], "data_type": "video"}),         # no answer
    ]
    train = tmp_path / "train_with_bad.jsonl"
    train.write_text("\n".join(good[:2] + bad[:2] + good[2:5] + bad[2:] + good[5:]) + "\n")
    return train, Path(rep.heldout_path), tmp_path / "synth"


@pytest.mark.e2e
def test_train_and_eval_flow_end_to_end(tmp_path, prefect_harness, monkeypatch):
    from flows.train_and_eval import train_and_eval

    monkeypatch.chdir(ROOT)
    train_file, heldout_file, data_root = _dataset_with_bad_records(tmp_path)
    data = f'data={{"train_files": ["{train_file}"], "eval_files": ["{heldout_file}"], "data_root": "{data_root}"}}'
    overrides = [*OVERRIDES, f"run.root={tmp_path}", "run.name=e2e", data]
    state = train_and_eval("conf/tiny.yaml", overrides, return_state=True)
    results = state.result()
    cfg = load_config(ROOT / "conf/tiny.yaml", overrides)
    run_dir = tmp_path / "e2e"

    # ingest: 8 good train + 4 held-out samples accepted; each bad record rejected with its line and reason.
    ingest = results["ingest"]
    samples = lance.dataset(ingest.uri).to_table()
    assert samples.num_rows == 12
    assert sorted(set(samples.column("split").to_pylist())) == ["heldout", "train"]
    assert ingest.metrics["read"] == 16 and ingest.metrics["rejected"] == 4
    assert ingest.metrics["accepted"] + ingest.metrics["rejected"] == ingest.metrics["read"]
    rejects = {r["source"]: r for r in lance.dataset(ingest.extra["rejects_uri"]).to_table().to_pylist()}
    name = str(train_file)
    assert sorted(rejects) == sorted(f"{name}:{line}" for line in (3, 4, 8, 9))
    assert "JSON" in rejects[f"{name}:3"]["reason"] or "json" in rejects[f"{name}:3"]["reason"]
    assert rejects[f"{name}:4"]["field"] == "videos" and "does-not-exist.mp4" in rejects[f"{name}:4"]["reason"]
    assert rejects[f"{name}:8"]["field"] == "problem_type" and "interpretive dance" in rejects[f"{name}:8"]["reason"]
    assert rejects[f"{name}:9"]["field"] == "answer"
    assert all(r["raw"] for r in rejects.values()), "the raw record is kept"

    # cache: one frames row per distinct medium, uint8 frames at factor-32 sizes.
    frames = lance.dataset(results["cache"].uri)
    media = {p for row in samples.to_pylist() for p in (row["videos"] or []) + (row["images"] or [])}
    assert frames.count_rows() == results["cache"].metrics["unique"] == len(media)
    assert results["cache"].metrics["failed"] == 0

    # train: two steps, a checkpoint per step (kept: the last two), state written last.
    ckpt = Path(results["train"].uri)
    assert ckpt.name == "step_000002" and read_state(ckpt)["step"] == 2
    assert sorted(p.name for p in ckpt.parent.glob("step_*")) == ["step_000001", "step_000002"]
    assert ckpt.parent.name == results["train"].extra["fingerprint"]
    assert list(ckpt.glob("*.distcp")), "sharded torch.distributed.checkpoint files"

    # merge: a Hugging Face directory that loads, with logits equal to the trained weights'.
    merged = Path(results["merge"].uri)
    model = AutoModelForImageTextToText.from_pretrained(merged)
    assert (merged / "model.safetensors").exists() and (merged / "tokenizer_config.json").exists()
    assert results["merge"].metrics["max_logit_diff"] < 1e-4
    probe = torch.load(ckpt / "probe.pt", weights_only=True)
    with torch.no_grad():
        logits = model(**probe["inputs"]).logits
    torch.testing.assert_close(logits, probe["logits"], atol=1e-4, rtol=0)
    base = AutoModelForImageTextToText.from_pretrained(results["model"].uri)
    changed = any(not torch.equal(a, b) for a, b in zip(model.state_dict().values(), base.state_dict().values()))
    assert changed, "training changed the weights"

    # eval: exactly one result per held-out item, a summary and a table.
    ev = Path(results["eval"].uri)
    rows = [json.loads(line) for line in (ev / "results.jsonl").read_text().splitlines()]
    heldout_ids = {r["sample_id"] for r in samples.to_pylist() if r["split"] == "heldout"}
    assert sorted(r["id"] for r in rows) == sorted(heldout_ids)
    summary = json.loads((ev / "summary.json").read_text())
    assert summary["items"] == 4 and summary["scored"] + summary["failed"] == 4
    assert (ev / "table.md").read_text().startswith("### heldout")

    # MLflow: one parent run, a nested run per stage, per-step metrics, the eval table, a registered model.
    client = MlflowClient(f"sqlite:///{run_dir / 'mlflow.db'}")
    exp = client.get_experiment_by_name(cfg.tracking.experiment)
    parents = json.loads((run_dir / "mlflow_parent_runs.json").read_text())
    assert len(parents) == 1, "one MLflow parent run for the one flow run"
    parent_id = next(iter(parents.values()))
    parent = client.get_run(parent_id)
    assert parent.data.params["trainer.steps"] == "2"
    children = client.search_runs([exp.experiment_id], f"tags.mlflow.parentRunId = '{parent_id}'")
    by_name = {c.info.run_name: c for c in children}
    assert set(by_name) == {"ingest", "cache", "train", "merge", "eval-heldout"}
    history = client.get_metric_history(by_name["train"].info.run_id, "reward/overall")
    assert [m.step for m in history] == [1, 2]
    warmup = client.get_metric_history(by_name["train"].info.run_id, "warmup/nll")
    assert [m.step for m in warmup] == [1, 2]
    assert "actor/pg_loss" in by_name["train"].data.metrics
    assert [a.path for a in client.list_artifacts(by_name["eval-heldout"].info.run_id, "eval")] == \
        ["eval/results.jsonl", "eval/summary.json", "eval/table.md"]
    versions = client.search_model_versions(f"name = '{cfg.tracking.register_model}'")
    assert len(versions) == 1

    # Prefect: the eval table and the ingest report are artifacts a person can open in the UI.
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId

    # Only this flow run's artifacts: other tests share the session's Prefect harness.
    with get_client(sync_client=True) as prefect:
        this_run = ArtifactFilterFlowRunId(any_=[state.state_details.flow_run_id])
        arts = prefect.read_artifacts(artifact_filter=ArtifactFilter(flow_run_id=this_run))
    by_key = {a.key: a for a in arts if a.key}  # (Prefect adds unkeyed result artifacts too)
    assert set(by_key) == {"eval-heldout", "eval-suite", "ingest-report", "run-summary", "progress-cache",
                           "progress-warm-up", "progress-train", "progress-merge", "progress-eval",
                           "train-rollouts", "train-validation"}
    # Readable rollouts: what the model wrote, with its reward and advantage, in the UI and in MLflow.
    rollouts = by_key["train-rollouts"].data
    rollouts = json.loads(rollouts) if isinstance(rollouts, str) else rollouts
    assert rollouts and {"prompt", "response", "reward_overall", "advantage"} <= set(rollouts[0])
    assert {"rollouts/step_000001.json", "rollouts/step_000002.json"} <= {
        a.path for a in client.list_artifacts(by_name["train"].info.run_id, "rollouts")}
    table = by_key["eval-heldout"].data
    table = json.loads(table) if isinstance(table, str) else table
    assert table[0]["part"] == "accuracy" and table[-1]["value"] == "4/4 scored, 0 failed"
    assert "| heldout | accuracy | official |" in by_key["eval-suite"].data
    assert "4 rejected" in by_key["ingest-report"].data
