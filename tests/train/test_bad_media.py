"""A video that exists but cannot be decoded passes ingestion, is rejected by the cache stage with its
reason, and is left out of training (counted) instead of stopping the run."""

import json
from pathlib import Path

import pytest

from evr1 import pipeline
from evr1.config import load_config
from evr1.data.ingest import read_samples
from evr1.data.synth import make_synthetic
from evr1.train.trainer import train

ROOT = Path(__file__).resolve().parents[2]


def _broken_dataset(tmp_path: Path):
    """6 training videos, the first truncated: the file exists, its stream does not decode."""
    rep = make_synthetic(tmp_path / "synth", 8, seed=2, heldout=2, image_fraction=0.0)
    records = [json.loads(line) for line in Path(rep.train_path).read_text().splitlines()]
    broken = tmp_path / "synth" / records[0]["videos"][0]
    broken.write_bytes(broken.read_bytes()[:200])
    return rep, broken


@pytest.mark.slow
def test_undecodable_video_is_excluded_from_training(tmp_path):
    rep, broken = _broken_dataset(tmp_path)
    cfg = load_config(ROOT / "conf/tiny.yaml", [
        f"run.root={tmp_path}", "run.name=bad", "tracking.enabled=false", "cache.workers=0",
        f'data={{"train_files": ["{rep.train_path}"], "data_root": "{tmp_path / "synth"}"}}',
        "model.tiny.family=qwen2_5_vl", "trainer.warmup_sft_steps=1", "trainer.steps=2", "trainer.prompts_per_step=2",
        "rollout.n=2", "trainer.world_size=1", "rollout.max_new_tokens=4", "trainer.save_every=0"])
    samples = pipeline.stage_ingest(cfg)
    assert samples.metrics["accepted"] == 6  # ingestion checks the file exists, not that it decodes
    model = pipeline.stage_model(cfg)
    frames = pipeline.stage_cache(cfg, samples, model)
    assert frames.metrics["failed"] == 1
    bad_id = next(r["sample_id"] for r in read_samples(samples.uri) if str(broken.resolve()) in r["videos"])
    assert json.loads(Path(frames.extra["undecodable"]).read_text()) == [bad_id]
    result = pipeline.stage_train(cfg, samples, frames, model)
    assert result.version == 2


@pytest.mark.slow
def test_without_the_cache_an_unreadable_sample_is_skipped_while_drawing(tmp_path):
    rep, _ = _broken_dataset(tmp_path)
    cfg = load_config(ROOT / "conf/tiny.yaml", [
        f"run.root={tmp_path}", "run.name=bad2", "tracking.enabled=false", "cache.enabled=false",
        f'data={{"train_files": ["{rep.train_path}"], "data_root": "{tmp_path / "synth"}"}}',
        "model.tiny.family=qwen2_5_vl", "trainer.warmup_sft_steps=0", "trainer.steps=3", "trainer.prompts_per_step=2",
        "rollout.n=2", "trainer.world_size=1", "rollout.max_new_tokens=4", "trainer.save_every=0"])
    samples = pipeline.stage_ingest(cfg)
    model = pipeline.stage_model(cfg)
    frames = pipeline.stage_cache(cfg, samples, model)
    result = train(cfg, samples=read_samples(samples.uri, split="train"), frames_uri=None, model_dir=Path(model.uri),
                   out_dir=tmp_path / "ckpt")
    # Three steps of two prompts draw the whole epoch of six: the broken one is met and skipped once.
    assert sum(h["data/skipped_samples"] for h in result.history) == 1
