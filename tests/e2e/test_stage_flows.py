"""The single-stage flows run on their own and share the whole DAG's cached upstream stages."""

from pathlib import Path

import lance
import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.e2e
def test_ingest_then_cache_flow_reuses_ingest(tmp_path, prefect_harness, monkeypatch):
    from flows.stages import cache_flow, ingest_flow

    monkeypatch.chdir(ROOT)
    overrides = [f"run.root={tmp_path}", "run.name=stages", "data.synth.n=4", "data.synth.heldout=2",
                 "cache.workers=0", "tracking.enabled=false"]
    samples = ingest_flow("conf/tiny.yaml", overrides)
    assert samples.metrics["accepted"] == 4
    version = lance.dataset(samples.uri).version
    frames = cache_flow("conf/tiny.yaml", overrides)
    assert frames.metrics["decoded"] == 4 and lance.dataset(frames.uri).count_rows() == 4
    assert lance.dataset(samples.uri).version == version, "the cache flow re-ran ingest instead of reusing it"


@pytest.mark.e2e
def test_evaluate_flow_runs_a_benchmark_suite_on_any_model_dir(tmp_path, prefect_harness, monkeypatch):
    from flows.stages import eval_flow
    from evr1.models import make_tiny
    from tests.synthetic_benchmark import videomme_on_synthetic

    monkeypatch.chdir(ROOT)
    ann, data = videomme_on_synthetic(tmp_path, 3)
    model = make_tiny("qwen3_vl", tmp_path / "model")
    overrides = [f"run.root={tmp_path}", "run.name=evalflow", "tracking.enabled=false", "eval.max_new_tokens=2",
                 f"eval.files.videomme={ann}", f"eval.data_dir={data}"]
    results = eval_flow("conf/tiny.yaml", str(model), overrides, benchmarks=["videomme"])
    assert list(results) == ["eval-videomme"]  # no heldout asked: nothing ingested or cached
    assert not (tmp_path / "evalflow" / "lance" / "samples").exists()
    summary = results["eval-videomme"].metrics
    assert summary["videomme/coverage"] == 1.0 and "videomme/duration/short" in summary
