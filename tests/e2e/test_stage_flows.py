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
