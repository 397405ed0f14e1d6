"""What a person watching a run sees, on one tiny flow run (and one rerun of it), with real Prefect,
MLflow on SQLite, Ray, Lance and a tiny model: progress artifacts at 100 %, the run summary (ran, then
cached), lineage tags and `mlflow.data` inputs on the stage runs, PNG plots, a typed experiment, and a
forced merge of identical weights reusing the registered model version."""

import os
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

ROOT = Path(__file__).resolve().parents[2]
PNG = b"\x89PNG\r\n\x1a\n"
OVERRIDES = ["run.name=obs", "data.synth.n=4", "data.synth.heldout=2", "trainer.steps=2", "trainer.warmup_sft_steps=1",
             "trainer.prompts_per_step=2", "rollout.n=2", "trainer.world_size=1", "rollout.max_new_tokens=4",
             "eval.max_new_tokens=4", "cache.workers=0"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory, prefect_harness):
    """Two flow runs of the same config: the first runs everything, the second forces only `merge`."""
    from flows.train_and_eval import train_and_eval

    root = tmp_path_factory.mktemp("obs")
    overrides = [f"run.root={root}", *OVERRIDES]
    cwd = os.getcwd()
    os.chdir(ROOT)
    try:
        first = train_and_eval("conf/tiny.yaml", overrides, return_state=True)
        first_summary = (root / "obs" / "summary.md").read_text()
        second = train_and_eval("conf/tiny.yaml", overrides, force=["merge"], return_state=True)
    finally:
        os.chdir(cwd)
    assert first.is_completed() and second.is_completed()
    return {"root": root / "obs", "first": first, "second": second, "first_summary": first_summary,
            "mlflow": MlflowClient(f"sqlite:///{root / 'obs' / 'mlflow.db'}")}


def _artifacts(flow_run_id):
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId

    with get_client(sync_client=True) as client:
        return client.read_artifacts(artifact_filter=ArtifactFilter(flow_run_id=ArtifactFilterFlowRunId(any_=[flow_run_id])))


def _summary_rows(markdown: str) -> dict[str, list[str]]:
    rows = {}
    for line in markdown.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("| ") and len(cells) == 5 and cells[0] not in ("stage", "---"):
            rows[cells[0]] = cells
    return rows


@pytest.mark.e2e
def test_progress_artifacts_reach_100_percent(runs):
    found = {a.key: a for a in _artifacts(runs["first"].state_details.flow_run_id) if a.type == "progress"}
    assert {"progress-cache", "progress-warm-up", "progress-train", "progress-merge", "progress-eval"} <= set(found)
    assert all(float(a.data) == 100.0 for a in found.values()), {k: a.data for k, a in found.items()}
    assert "reward" in found["progress-train"].description and "score" in found["progress-eval"].description


@pytest.mark.e2e
def test_summary_names_every_stage_ran_then_cached(runs):
    first = _summary_rows(runs["first_summary"])
    assert list(first) == ["ingest", "model", "cache", "train", "merge", "eval-heldout"]
    assert all(r[1] == "ran" and r[2].endswith(" s") for r in first.values()), first
    assert first["train"][3].startswith("reward/overall") and "checkpoints" in first["train"][4]
    markdown = (runs["root"] / "summary.md").read_text()
    second = _summary_rows(markdown)
    assert {k: r[1] for k, r in second.items()} == {"ingest": "cached", "model": "cached", "cache": "cached",
                                                     "train": "cached", "merge": "ran", "eval-heldout": "cached"}
    assert "MLflow run:" in markdown and "Prefect flow run:" in markdown
    artifact = [a for a in _artifacts(runs["second"].state_details.flow_run_id) if a.key == "run-summary"]
    assert artifact and artifact[0].data == markdown


@pytest.mark.e2e
def test_stage_runs_carry_lineage_tags_and_datasets(runs):
    client: MlflowClient = runs["mlflow"]
    exp = client.get_experiment_by_name("evr1-tiny")
    assert exp.tags["mlflow.experimentKind"] == "custom_model_development"
    stage_runs = {}
    for r in client.search_runs([exp.experiment_id], order_by=["attributes.start_time ASC"]):
        if "evr1.stage" in r.data.tags:
            stage_runs.setdefault(r.data.tags["evr1.stage"], r)  # the first flow run's
    flow_run_id = str(runs["first"].state_details.flow_run_id)
    for stage, r in stage_runs.items():
        t = r.data.tags
        assert t["prefect.flow_run_id"] == flow_run_id and flow_run_id in t["prefect.flow_run_url"], stage
        assert len(t["evr1.code_version"]) == 16 and len(t["evr1.config_fingerprint"]) == 16, stage
    ingest, cache, train, merge = (stage_runs[s].data.tags for s in ("ingest", "cache", "train", "merge"))
    assert ingest["evr1.out.samples_uri"].endswith("samples") and ingest["evr1.out.samples_version"].isdigit()
    assert cache["evr1.in.samples_version"] == ingest["evr1.out.samples_version"]
    assert cache["evr1.out.frames_uri"] == train["evr1.in.frames_uri"]
    assert Path(train["evr1.out.checkpoint"]).is_dir() and train["evr1.out.step"] == "2"
    assert merge["evr1.in.checkpoint"] == train["evr1.out.checkpoint"]
    assert merge["evr1.out.model_uri"] == "models:/evr1-policy/1" and merge["evr1.out.registered_version"] == "1"
    assert stage_runs["eval-heldout"].data.tags["evr1.in.model"] == merge["evr1.out.model_dir"]
    inputs = {(d.dataset.name.split("@")[0], {t.key: t.value for t in d.tags}["mlflow.data.context"])
              for d in stage_runs["train"].inputs.dataset_inputs}
    assert {("samples", "training"), ("frames", "training")} <= inputs
    evals = {d.dataset.name.split("@")[0] for d in stage_runs["eval-heldout"].inputs.dataset_inputs}
    assert "samples" in evals


@pytest.mark.e2e
def test_forced_merge_of_identical_weights_reuses_the_model_version(runs):
    client: MlflowClient = runs["mlflow"]
    merges = [r for r in client.search_runs([client.get_experiment_by_name("evr1-tiny").experiment_id],
                                            "tags.`evr1.stage` = 'merge'")]
    assert len(merges) == 2  # merge ran twice (the second time forced)
    name = merges[0].data.tags["evr1.out.registered_model"]
    versions = client.search_model_versions(f"name = '{name}'")
    assert len(versions) == 1, [v.version for v in versions]
    assert {m.data.tags["evr1.out.registered_version"] for m in merges} == {str(versions[0].version)}
    assert "GRPO-trained from" in versions[0].description


@pytest.mark.e2e
def test_plots_are_png_artifacts_of_the_runs(runs, tmp_path):
    import mlflow

    client: MlflowClient = runs["mlflow"]
    exp = client.get_experiment_by_name("evr1-tiny")
    train = client.search_runs([exp.experiment_id], "tags.`evr1.stage` = 'train'")[0]
    parent = client.get_run(train.data.tags["mlflow.parentRunId"])
    for run, name in ((train, "plots/training_curves.png"), (parent, "plots/benchmark_scores.png")):
        local = mlflow.artifacts.download_artifacts(run_id=run.info.run_id, artifact_path=name, dst_path=str(tmp_path),
                                                    tracking_uri=f"sqlite:///{runs['root'] / 'mlflow.db'}")
        data = Path(local).read_bytes()
        assert data.startswith(PNG) and len(data) > 2000, name


@pytest.mark.e2e
def test_mlflow_reads_as_its_users_expect(runs):
    """Parent runs named by the run and the flow run; the config on the train run beside its curves;
    headline figures on the parent; the registered version scored and named by the `candidate` alias
    that the nightly evaluation follows."""
    from evr1.tracking.tracker import CANDIDATE_ALIAS, latest_model_version

    client: MlflowClient = runs["mlflow"]
    exp = client.get_experiment_by_name("evr1-tiny")
    parents = client.search_runs([exp.experiment_id], "tags.`evr1.run_dir` != ''")
    names = {r.info.run_name for r in parents}
    assert len(names) == 2 and all(n.startswith("obs · ") for n in names), names
    train = client.search_runs([exp.experiment_id], "tags.`evr1.stage` = 'train'")[0]
    assert train.data.params["trainer.steps"] == "2" and train.data.params["rollout.n"] == "2"
    first_parent = client.get_run(train.data.tags["mlflow.parentRunId"])
    assert {"train/reward/overall", "eval/heldout"} <= set(first_parent.data.metrics)
    merge = client.search_runs([exp.experiment_id], "tags.`evr1.stage` = 'merge'")[0]
    name = merge.data.tags["evr1.out.registered_model"]
    version = client.get_model_version_by_alias(name, CANDIDATE_ALIAS)
    assert str(version.version) == merge.data.tags["evr1.out.registered_version"]
    assert 0.0 <= float(version.tags["eval.heldout"]) <= 1.0
    found = latest_model_version(f"sqlite:///{runs['root'] / 'mlflow.db'}", name)
    assert found is not None and str(found[0]) == str(version.version)
