"""The nightly flow evaluates the newest registered model on a benchmark suite: a real MLflow registry
on SQLite, a real tiny model, synthetic videos behind a Video-MME-format annotation file, the Prefect
test harness, the suite table artifact beside the published numbers."""

import json
from pathlib import Path

import mlflow
import pytest

from evr1.models import make_tiny
from evr1.tracking import Tracker
from tests.synthetic_benchmark import videomme_on_synthetic

ROOT = Path(__file__).resolve().parents[2]


def _register(tmp_path: Path, uri: str, model_dir: Path) -> str:
    tr = Tracker(uri, "evr1", artifact_root=tmp_path / "artifacts")
    tr.start_parent("train")
    with tr.stage("merge"):
        return tr.register_model_dir(model_dir, "evr1-policy")


@pytest.mark.e2e
def test_nightly_eval_picks_the_newest_registered_version(tmp_path, prefect_harness, monkeypatch):
    from prefect.client.orchestration import get_client  # noqa: F401  (harness is active)
    from prefect.artifacts import Artifact

    from flows.nightly_eval import nightly_eval

    monkeypatch.chdir(ROOT)
    uri = f"sqlite:///{tmp_path / 'registry.db'}"
    first, second = tmp_path / "m1", tmp_path / "m2"
    make_tiny("qwen3_vl", first, seed=1)
    make_tiny("qwen3_vl", second, seed=2)
    assert _register(tmp_path, uri, first) == "1"
    assert _register(tmp_path, uri, second) == "2"
    ann, data_dir = videomme_on_synthetic(tmp_path, 4)
    overrides = [f"run.root={tmp_path / 'runs'}", f"tracking.uri={uri}", "data.synth.n=4", "data.synth.heldout=2",
                 "eval.benchmarks=[heldout, videomme]", f"eval.files.videomme={ann}", f"eval.data_dir={data_dir}",
                 "eval.max_new_tokens=4", "eval.reference_model=qwen3-vl-8b-instruct"]
    results = nightly_eval("conf/nightly_tiny.yaml", overrides)

    assert results["model"].version == 2 and Path(results["model"].uri).resolve() == second.resolve()
    for name, n in (("heldout", 2), ("videomme", 4)):
        summary = json.loads(Path(results[f"eval-{name}"].extra["summary"]).read_text())
        assert summary["items"] == n and summary["scored"] == n and summary["failed"] == 0
    vm = json.loads(Path(results["eval-videomme"].extra["summary"]).read_text())
    assert vm["metric"] == "accuracy" and "duration/short" in vm["parts"]

    suite = Artifact.get("eval-suite")
    assert suite is not None and "| videomme | accuracy | official |" in suite.data and "71.4" in suite.data
    runs = mlflow.MlflowClient(uri).search_runs(
        [mlflow.MlflowClient(uri).get_experiment_by_name("evr1-nightly").experiment_id])
    logged = {k for r in runs for k in r.data.metrics}
    assert "videomme/accuracy" in logged and "heldout/coverage" in logged

    # The next night, with no new version: the same results folder, nothing generated again.
    lines = Path(results["eval-videomme"].uri, "results.jsonl").read_text()
    again = nightly_eval("conf/nightly_tiny.yaml", overrides)
    assert again["eval-videomme"].uri == results["eval-videomme"].uri
    assert Path(again["eval-videomme"].uri, "results.jsonl").read_text() == lines
