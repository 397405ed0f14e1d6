"""GRPO with `rollout.engine: vllm` through every stage of the DAG on vLLM's CPU build, and the
evaluation on the vLLM engine: ingest → tiny model → frame cache → three training steps (the rollout
worker's engine is vLLM, weights synced into it before every step) → merge → held-out evaluation
(vLLM in the eval's Ray actor).

The stages run as the plain functions `evr1 run` chains: this venv has no Prefect (vLLM's fastapi
pin excludes it), and the flow adds nothing to what is tested here (tests/e2e runs the flow).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from evr1 import pipeline
from evr1.config import load_config
from evr1.train.checkpoint import read_state

pytestmark = pytest.mark.vllm

ROOT = Path(__file__).resolve().parents[2]


def test_grpo_on_vllm_through_every_stage(tmp_path):
    cfg = load_config(ROOT / "conf" / "tiny.yaml", [
        f"run.root={tmp_path}", "run.name=vllm", "tracking.enabled=false", "cache.workers=0",
        "data.synth.n=6", "data.synth.heldout=3",
        "model.tiny.sizes={num_attention_heads: 2, num_key_value_heads: 1}", "model.tiny.init=prompt_dependent",
        "rollout.engine=vllm", "rollout.n=2", "rollout.max_new_tokens=8",
        "rollout.vllm={enforce_eager: true, max_model_len: 2048, kv_cache_gib: 0.5}",
        "rollout.correction.enabled=true",
        "trainer.steps=3", "trainer.warmup_sft_steps=1", "trainer.prompts_per_step=2", "trainer.world_size=1",
        "trainer.val_every=0", "trainer.save_every=0",
        "eval.max_new_tokens=8", "eval.batch_size=2", "eval.concurrency=2",
    ])
    samples = pipeline.stage_ingest(cfg)
    model = pipeline.stage_model(cfg)
    frames = pipeline.stage_cache(cfg, samples, model)
    trained = pipeline.stage_train(cfg, samples, frames, model)
    assert trained.version == 3
    history = read_state(Path(trained.uri))["history"]
    assert [h["step"] for h in history] == [1, 2, 3]
    merged = pipeline.stage_merge(cfg, trained, model)
    assert merged.metrics["max_logit_diff"] < 1e-3  # the merged model is the trained one
    (heldout,) = pipeline.stage_eval_suite(cfg, merged, samples, frames, ["heldout"])
    summary = json.loads(Path(heldout.extra["summary"]).read_text())
    assert summary["items"] == 3 and summary["scored"] == 3 and summary["failed"] == 0
    for h in history:
        # vLLM returned the sampled tokens' log-probs (raw, at temperature 1): the gap to the trainer's is
        # logged every step, small (fp32 both sides, the same weights after the sync), weights near 1.
        assert h["rollout/logprob_gap_max"] < 1e-3, h
        assert math.isclose(h["rollout/is_weight_mean"], 1.0, abs_tol=1e-3), h
        assert h["perf/sync_bytes"] > 0, h


def test_colocated_vllm_engines_generate_what_one_separate_engine_does(tmp_path):
    """Two ranks, each with a vLLM engine in its own process (rollout.placement: colocated), against
    one separate vLLM worker, at the same seeds: the same samples and rewards (each prompt's seed comes
    from the data, vLLM seeds each request), the same bytes moved per engine; and after every sync the
    engines hold the policy (the gap between their log-probs and the trainer's stays at fp32 noise, on
    both placements, after a warm-up step has moved every weight; a stale lm_head read 0.01-0.1)."""
    common = [
        "tracking.enabled=false", "cache.workers=0", "data.synth.n=6", "data.synth.heldout=1",
        "model.tiny.sizes={num_attention_heads: 2, num_key_value_heads: 1}", "model.tiny.init=prompt_dependent",
        "rollout.engine=vllm", "rollout.n=2", "rollout.max_new_tokens=8",
        "rollout.vllm={enforce_eager: true, max_model_len: 2048, kv_cache_gib: 0.5}",
        # One warm-up step moves the weights before the first sync: a random model's rewards are all 0
        # (no gradient), so without it every sync would hand over the checkpoint's own weights.
        "trainer.steps=2", "trainer.warmup_sft_steps=1", "trainer.prompts_per_step=2", "trainer.world_size=2",
        "trainer.val_every=0", "trainer.save_every=0", "trainer.lr=0.01",
    ]
    histories = {}
    for placement in ("colocated", "separate"):
        cfg = load_config(ROOT / "conf" / "tiny.yaml", [f"run.root={tmp_path}", f"run.name={placement}", *common,
                                                        f"rollout.placement={placement}"])
        samples = pipeline.stage_ingest(cfg)
        model = pipeline.stage_model(cfg)
        frames = pipeline.stage_cache(cfg, samples, model)
        trained = pipeline.stage_train(cfg, samples, frames, model)
        histories[placement] = read_state(Path(trained.uri))["history"]
    for col, sep in zip(histories["colocated"], histories["separate"], strict=True):
        assert col["perf/rollout_engines"] == 2.0 and sep["perf/rollout_engines"] == 1.0
        for key in ("reward/overall", "response/length_mean", "perf/sync_bytes"):
            assert col[key] == pytest.approx(sep[key], rel=1e-6), key
        assert col["rollout/logprob_gap_max"] < 1e-3, col
        assert sep["rollout/logprob_gap_max"] < 1e-3, sep
