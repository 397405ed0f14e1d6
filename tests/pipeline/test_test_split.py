"""A test split (`data.test_files`, `data.synth.test`): ingested and cached with the others, never read by
training or validation, scored by the `test` benchmark once at the end, apart from `heldout`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evr1 import pipeline
from evr1.config import load_config
from evr1.config.preflight import preflight
from evr1.data.ingest import read_samples
from evr1.eval.heldout import uses_run_samples

ROOT = Path(__file__).resolve().parents[2]


def _cfg(tmp_path: Path, *extra: str):
    return load_config(ROOT / "conf" / "tiny.yaml", [
        f"run.root={tmp_path}", "run.name=split", "tracking.enabled=false", "cache.workers=0",
        "eval.max_new_tokens=2", "eval.batch_size=4", *extra])


def test_the_test_split_is_ingested_cached_and_scored_apart_from_heldout(tmp_path):
    cfg = _cfg(tmp_path, "data.synth.n=8", "data.synth.heldout=2", "data.synth.test=4")
    samples = pipeline.stage_ingest(cfg)
    assert (samples.metrics["accepted_train"], samples.metrics["accepted_heldout"], samples.metrics["accepted_test"]) == (6, 2, 4)
    assert samples.metrics["accepted"] == samples.metrics["read"] == 12
    splits = {s: read_samples(samples.uri, split=s) for s in ("train", "heldout", "test")}
    ids = {s: {r["sample_id"] for r in rows} for s, rows in splits.items()}
    assert len(ids["test"]) == 4 and not ids["test"] & (ids["train"] | ids["heldout"])
    written = [json.loads(line) for line in (pipeline.run_paths(cfg)["data"] / "synth" / "test.jsonl").read_text().splitlines()]
    assert len(written) == 4 and {r["problem"] for r in splits["test"]} <= {r["problem"] for r in written}

    model = pipeline.stage_model(cfg)
    frames = pipeline.stage_cache(cfg, samples, model)
    assert frames.metrics["failed"] == 0 and frames.metrics["requested"] == 12  # the test clips are cached too

    heldout, test = pipeline.stage_eval_suite(cfg, model, samples, frames, ["heldout", "test"])
    h = json.loads(Path(heldout.extra["summary"]).read_text())
    t = json.loads(Path(test.extra["summary"]).read_text())
    assert (h["items"], t["items"]) == (2, 4) and t["scored"] == 4 and t["failed"] == 0
    scored = [json.loads(line)["id"] for line in (Path(test.uri) / "results.jsonl").read_text().splitlines()]
    assert set(scored) == ids["test"]


def test_benchmarks_that_read_the_run_samples_are_known():
    assert uses_run_samples(["test"]) and uses_run_samples(["videomme", "heldout"])
    assert not uses_run_samples(["videomme", "mvbench"])


def test_test_files_are_checked_before_work(tmp_path):
    cfg = _cfg(tmp_path, f"data.train_files=[{tmp_path / 'train.jsonl'}]", "data.synth=null",
               f"data.test_files=[{tmp_path / 'missing-test.jsonl'}]")
    (tmp_path / "train.jsonl").write_text("")
    problems = " ".join(preflight(cfg, ("data",)))
    assert "data.test_files[0]" in problems and "missing-test.jsonl" in problems


@pytest.mark.parametrize("split_files", ["test_files"])
def test_a_user_test_file_becomes_the_test_split(tmp_path, split_files):
    """`data.test_files` with a user's own JSONL (here the synthetic set's files, given as files)."""
    first = _cfg(tmp_path / "gen", "data.synth.n=6", "data.synth.heldout=2", "data.synth.test=3")
    pipeline.stage_ingest(first)
    synth = pipeline.run_paths(first)["data"] / "synth"
    cfg = _cfg(tmp_path / "user", "data.synth=null", f"data.train_files=[{synth / 'train.jsonl'}]",
               f"data.eval_files=[{synth / 'heldout.jsonl'}]", f"data.{split_files}=[{synth / 'test.jsonl'}]",
               f"data.data_root={synth}")
    samples = pipeline.stage_ingest(cfg)
    assert samples.metrics["accepted_test"] == 3
    assert len(read_samples(samples.uri, split="test")) == 3
