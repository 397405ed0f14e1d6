"""The "old" log-prob pass skipped on a strictly on-policy update (`trainer.skip_old_log_probs`): when
is the update strictly on-policy (the config), does the skipped step train exactly as the step with
the pass (one real PolicyWorker rank, tiny Qwen2.5-VL, gloo), and does `train` skip it while keeping
every metric that read the old log-probs (Ray, a real frame cache, the HF engine). And Clip-Cov
acting on such an update, where the ratio is exactly 1, through the same rank."""

from contextlib import contextmanager
from pathlib import Path

import pytest
import ray
import torch

from evr1 import pipeline
from evr1.cluster.connect import ensure_ray
from evr1.config import ConfigError, load_config
from evr1.data.ingest import read_samples
from evr1.models import load_adapter
from evr1.models.families import family_of
from evr1.train.actor_group import worker_options
from evr1.train.protocol import ReaderSpec, Shard
from evr1.train.trainer import train
from evr1.train.workers.policy import PolicyWorker
from tests.train.conftest import letter_density_data, letter_density_overrides

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "conf/tiny.yaml"


@pytest.mark.parametrize("overrides, reason", [
    (["trainer.ppo_epochs=2"], "trainer.ppo_epochs is 2"),
    (["trainer.mini_batch_size=8"], "trainer.mini_batch_size 8 < prompts_per_step × rollout.n = 16"),
    (["trainer.mode=one_step_off", "rollout.placement=separate"], "trainer.mode is one_step_off"),
    (["rollout.correction.enabled=true"], "rollout.correction is enabled"),
    (["algorithm.use_kl_loss=false", "algorithm.use_kl_in_reward=true"], "algorithm.use_kl_in_reward is true"),
])
def test_skip_true_on_an_update_that_is_not_strictly_on_policy_is_refused_with_the_reason(overrides, reason):
    assert not load_config(TINY, overrides).skips_old_log_probs()  # auto: the pass runs
    assert not load_config(TINY, [*overrides, "trainer.skip_old_log_probs=false"]).skips_old_log_probs()
    with pytest.raises(ConfigError, match="skip_old_log_probs is true") as err:
        load_config(TINY, [*overrides, "trainer.skip_old_log_probs=true"])
    assert reason in str(err.value)


def test_auto_skips_on_a_strictly_on_policy_update_and_false_never_does():
    # conf/tiny.yaml: synchronous, one epoch, one mini-batch (also when it is the whole batch), no correction
    assert load_config(TINY).skips_old_log_probs()
    assert load_config(TINY, ["trainer.mini_batch_size=16"]).skips_old_log_probs()
    assert load_config(TINY, ["trainer.skip_old_log_probs=true"]).skips_old_log_probs()
    assert not load_config(TINY, ["trainer.skip_old_log_probs=false"]).skips_old_log_probs()
    with pytest.raises(ConfigError, match="skip_old_log_probs"):
        load_config(TINY, ["trainer.skip_old_log_probs=sometimes"])


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("on_policy")
    base = [f"run.root={tmp}", "run.name=base", "tracking.enabled=false", "cache.workers=0",
            *letter_density_overrides(letter_density_data(tmp)), "model.tiny.family=qwen2_5_vl",
            "trainer.warmup_sft_steps=0", "trainer.prompts_per_step=2", "rollout.n=2", "trainer.world_size=1",
            "trainer.micro_batch_size=2", "rollout.max_new_tokens=8", "trainer.save_every=0", "trainer.steps=1",
            "algorithm.use_kl_loss=true", "algorithm.kl_loss_coef=0.1", "trainer.lr=0.01"]
    cfg = load_config(TINY, base)
    samples = pipeline.stage_ingest(cfg)
    model = pipeline.stage_model(cfg)
    frames = pipeline.stage_cache(cfg, samples, model)
    return tmp, base, read_samples(samples.uri, split="train"), Path(model.uri), frames.uri


@contextmanager
def _rank(setup, overrides: list[str]):
    """One PolicyWorker rank (world size 1) built from the setup's config with `overrides`."""
    _, base, _, model_dir, frames_uri = setup
    cfg = load_config(TINY, [*base, *overrides])
    spec = ReaderSpec(frames_uri, cfg.cache.frame_params(family_of(model_dir).factor), "prefer-cache",
                      str(cfg.data.data_root), None, False)
    ensure_ray(num_cpus=2)
    worker = ray.remote(num_cpus=0)(PolicyWorker).remote(0, 1, str(model_dir), worker_options(cfg), spec)
    try:
        ray.get(worker.setup.remote(ray.get(worker.endpoint.remote())))
        yield worker
    finally:
        ray.get(worker.shutdown.remote())
        ray.kill(worker)


def _shard(setup) -> Shard:
    """Two prompts with two responses each (one with an answer tag), advantages of both signs."""
    rows, model_dir = setup[2], setup[3]
    tok = load_adapter(model_dir).tokenizer
    texts = ["<answer>e</answer>", "left then right", "<think>red</think><answer>B</answer>", "e e e"]
    responses = [tok.encode(t, add_special_tokens=False) for t in texts]
    advantages = [[a] * len(r) for a, r in zip((1.0, -1.0, 0.5, -0.5), responses)]
    return Shard(rows=[rows[0], rows[0], rows[1], rows[1]], responses=responses, advantages=advantages,
                 global_token_count=sum(map(len, responses)), global_sequence_count=4)


def _one_step(worker, shard: Shard, *, old: bool) -> tuple[dict, dict, dict]:
    """The log-prob pass (the reference's, and the policy's when `old`), then one update: (what the pass
    returned, the update's metrics, the new weights)."""
    passed = ray.get(worker.log_probs.remote(shard, old))
    shard.old_log_probs, shard.ref_log_probs = passed["old"], passed["ref"]
    metrics = ray.get(worker.step.remote(shard, 0.01, 1))
    return passed, metrics, ray.get(worker.full_state_dict.remote())


@pytest.mark.slow
def test_the_skipped_pass_trains_exactly_as_the_pass(setup):
    with _rank(setup, []) as worker:
        with_pass, want, want_weights = _one_step(worker, _shard(setup), old=True)
    with _rank(setup, []) as worker:
        skipped, got, got_weights = _one_step(worker, _shard(setup), old=False)
    # The skipping rank computed the reference's log-probs alone, identical to the other's.
    assert skipped["old"] is None and with_pass["old"] is not None
    assert skipped["ref"] == with_pass["ref"]
    # Ratio exactly 1: the old log-probs are the update's own, detached; nothing to clip.
    assert got["actor/ratio_mean"] == got["actor/ratio_min"] == got["actor/ratio_max"] == 1.0
    assert got["actor/clipfrac"] == got["actor/clipfrac_dual"] == got["actor/approx_kl"] == 0.0
    assert want["actor/ratio_mean"] == pytest.approx(1.0, abs=1e-6) and want["actor/clipfrac"] == 0.0
    for key in ("actor/pg_loss", "actor/kl_loss", "actor/entropy", "actor/grad_norm"):
        assert got[key] == pytest.approx(want[key], rel=1e-6, abs=1e-9), key
    assert want["actor/grad_norm"] > 0 and want["actor/kl_loss"] == pytest.approx(0.0, abs=1e-6)
    # the same update: the weights after it agree to float rounding (Adam's first step moves each by ~lr)
    for name, w in want_weights.items():
        assert torch.allclose(got_weights[name], w, rtol=0.0, atol=1e-6), name
    # The update returns its own log-probs when it had no old ones: they are what the pass computed.
    assert want["rows"]["log_probs"] is None
    for own, old in zip(got["rows"]["log_probs"], with_pass["old"], strict=True):
        assert own == pytest.approx(old, abs=1e-6)
    # and each response's per-token entropies, for the answer-entropy diagnostic
    assert [len(e) for e in got["rows"]["entropy"]] == [len(r) for r in _shard(setup).responses]
    for a, b in zip(got["rows"]["entropy"], want["rows"]["entropy"], strict=True):
        assert a == pytest.approx(b, abs=1e-6) and min(a) > 0


@pytest.mark.slow
def test_an_update_without_old_log_probs_must_be_strictly_on_policy(setup):
    """A shard without old log-probs but two epochs: the update's own log-probs would stand for the old
    ones after the first optimizer step moved the policy. The rank refuses it before training."""
    with (_rank(setup, ["trainer.ppo_epochs=2", "trainer.skip_old_log_probs=false"]) as worker,
          pytest.raises(ray.exceptions.RayTaskError, match="not strictly on-policy")):
        _one_step(worker, _shard(setup), old=False)


@pytest.mark.slow
def test_train_skips_the_pass_and_keeps_the_engine_comparison_and_the_diagnostics(setup):
    """No KL term and a frozen tower: no log-prob pass at all, so the update encodes each prompt's
    media itself (once per prompt); the HF engine's log-probs are compared with the update's own."""
    tmp, base, rows, model_dir, frames_uri = setup
    cfg = load_config(TINY, [*base, "algorithm.use_kl_loss=false", "model.freeze_vision_tower=true"])
    assert cfg.skips_old_log_probs()
    (h,) = train(cfg, samples=rows, frames_uri=frames_uri, model_dir=model_dir, out_dir=tmp / "skip").history
    assert h["perf/old_log_probs_skipped"] == 1.0
    assert "perf/log_probs_micro_batches" not in h and h["time/log_probs_s"] < 0.01  # the pass never ran
    assert "perf/update_micro_batches" in h and h["actor/grad_norm"] > 0
    assert h["perf/rank_vision_passes"] == cfg.trainer.prompts_per_step  # the update encoded each prompt once
    assert h["actor/ratio_mean"] == 1.0 and h["actor/clipfrac"] == 0.0
    assert h["rollout/logprob_gap_max"] < 1e-4  # the engine's log-probs against the update's (fp32, temperature 1)
    assert 0.0 <= h["diag/zero_adv_groups"] <= 1.0 and "diag/format_only_groups" in h
    assert any(k.startswith("diag/zero_adv_groups/") for k in h)  # per family (here: the problem type)


@pytest.mark.slow
def test_clip_cov_acts_on_an_on_policy_update_through_the_rank(setup):
    """A band wide enough to hold every token and clip_cov_ratio 0.5: each micro-batch (two responses
    here) takes the gradient from ⌊v/2⌋ of its v tokens (PPO clips nothing at ratio 1), and the rank's
    metric is the mean over its micro-batches of that share."""
    shard = _shard(setup)
    lengths = [len(r) for r in shard.responses]
    micro = [lengths[0] + lengths[1], lengths[2] + lengths[3]]  # trainer.micro_batch_size=2
    with _rank(setup, ["algorithm.policy_loss=clip_cov", "algorithm.clip_cov_ratio=0.5",
                       "algorithm.clip_cov_lb=-1000", "algorithm.clip_cov_ub=1000"]) as worker:
        _, got, _ = _one_step(worker, shard, old=False)
    assert got["actor/ratio_mean"] == 1.0 and got["actor/clipfrac"] == 0.0
    assert got["actor/clipcov_candidate_frac"] == 1.0
    assert got["actor/clipcov_frac"] == pytest.approx(sum((v // 2) / v for v in micro) / 2)
