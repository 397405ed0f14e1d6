"""Trainer options beyond plain GRPO, each run for real on Ray/FSDP2 with a tiny Qwen2.5-VL: ReMax with a
greedy baseline, KL in the reward with the adaptive controller, GDPO, DAPO dynamic sampling and
overlong shaping, the LR warm-up, and periodic validation."""

from pathlib import Path

import pytest

from evr1 import pipeline
from evr1.config import load_config
from evr1.data.ingest import read_samples
from evr1.train.trainer import train
from tests.train.conftest import letter_density_data, letter_density_overrides

ROOT = Path(__file__).resolve().parents[2]

@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("options")
    base = [f"run.root={tmp}", "run.name=options", "tracking.enabled=false", "cache.workers=0",
            *letter_density_overrides(letter_density_data(tmp)), "model.tiny.family=qwen2_5_vl",
            "trainer.warmup_sft_steps=0", "trainer.prompts_per_step=2", "rollout.n=2", "trainer.world_size=2",
            "trainer.micro_batch_size=4", "rollout.max_new_tokens=8", "trainer.save_every=0"]
    cfg = load_config(ROOT / "conf/tiny.yaml", base)
    samples = pipeline.stage_ingest(cfg)
    model = pipeline.stage_model(cfg)
    frames = pipeline.stage_cache(cfg, samples, model)
    return tmp, base, samples, model, frames


def _train(setup, name, overrides):
    tmp, base, samples, model, frames = setup
    cfg = load_config(ROOT / "conf/tiny.yaml", [*base, *overrides])
    return train(cfg, samples=read_samples(samples.uri, split="train"), frames_uri=frames.uri,
                 model_dir=Path(model.uri), out_dir=tmp / name, val_samples=read_samples(samples.uri, split="heldout"))


@pytest.mark.slow
def test_remax_kl_in_reward_lr_warmup_and_validation(setup):
    result = _train(setup, "remax", [
        "trainer.steps=2", "algorithm.adv_estimator=remax", "algorithm.use_kl_loss=false",
        "algorithm.use_kl_in_reward=true", "algorithm.kl_type=adaptive", "algorithm.kl_coef=0.2",
        "algorithm.kl_horizon=10", "trainer.lr=0.01", "trainer.lr_warmup_steps=2", "trainer.val_every=2",
        "algorithm.overlong_buffer_len=4"])
    first, second = result.history
    assert first["actor/lr"] == pytest.approx(0.005) and second["actor/lr"] == pytest.approx(0.01)
    # Adaptive β: the first step's KL is 0 (policy = reference), below target, so β shrinks by 0.2·n/horizon.
    assert first["actor/kl_coef"] == pytest.approx(0.2)
    assert second["actor/kl_coef"] == pytest.approx(0.2 * (1 - 0.2 * 4 / 10))
    assert "val/overall" in second and "val/overall" not in first
    # validated once more before the first RL step, with a breakdown per family (here: problem type)
    assert {"val/overall", "val/accuracy", "val/format"} <= set(result.before_rl)
    assert any(k.startswith("val/accuracy/") for k in result.before_rl)
    assert second["perf/throughput"] > 0


@pytest.mark.slow
def test_gdpo_with_dynamic_sampling_keeps_informative_groups(setup):
    result = _train(setup, "gdpo", ["trainer.steps=1", "algorithm.adv_estimator=gdpo", "algorithm.dynamic_sampling=true"])
    # A continuous reward varies inside every group: all drawn groups are informative and kept.
    assert result.history[0]["data/kept_groups"] == 2 and result.history[0]["data/sample_batches"] == 1


@pytest.mark.slow
def test_dynamic_sampling_skips_a_step_with_nothing_to_learn(setup):
    # filter_key "format": without an answer tag every response scores 0, so every group is constant.
    result = _train(setup, "skip", ["trainer.steps=1", "algorithm.dynamic_sampling=true",
                                    "algorithm.filter_key=format", "algorithm.max_sample_batches=2"])
    h = result.history[0]
    assert h["data/kept_groups"] == 0 and h["data/sample_batches"] == 2 and h["data/skipped"] == 1
    assert result.checkpoint.name == "step_000001"


@pytest.mark.slow
def test_mini_batches_take_several_optimizer_steps_and_saves_are_atomic(setup):
    tmp = setup[0]
    result = _train(setup, "mini", ["trainer.steps=1", "trainer.mini_batch_size=2", "trainer.save_every=1"])
    assert result.history[0]["actor/updates"] == 2  # 4 responses, 2 per optimizer step
    assert not list((tmp / "mini").glob("*.tmp")), "no unfinished save left behind"
    # resume=false starts over: the earlier run's checkpoints are cleared, not mixed in.
    again = _train(setup, "mini", ["trainer.steps=1", "trainer.resume=false", "trainer.save_every=1"])
    assert again.history[0]["actor/updates"] == 1 and len(again.history) == 1
