"""One vision pass per prompt per step: with a frozen tower, a colocated engine encodes each prompt it
generates from once, and its rank's log-prob and update passes take those features from the store
they share (`RolloutWorker.share_features`, `PolicyWorker._encode`) instead of running the tower again.
And the HF engine's behaviour log-probs reach the trainer, equal to its own (`rollout/logprob_gap_*`).
"""

from pathlib import Path

import numpy as np
import pytest
import torch

from evr1 import pipeline
from evr1.config import load_config
from evr1.data.ingest import read_samples
from evr1.models import encode_visual, make_tiny
from evr1.models.shared_prefix import media_counts
from evr1.train.trainer import train
from evr1.train.workers.rollout import RolloutWorker
from tests.engines.conftest import clip
from tests.train.conftest import letter_density_data, letter_density_overrides

ROOT = Path(__file__).resolve().parents[2]
LOSS_KEYS = ("actor/pg_loss", "actor/kl_loss", "actor/entropy", "actor/grad_norm", "reward/overall",
             "response/length_mean")


@pytest.fixture(scope="module")
def worker(tmp_path_factory):
    model_dir = make_tiny("qwen2_5_vl", tmp_path_factory.mktemp("vision_store") / "m", seed=1)
    return RolloutWorker(str(model_dir), "hf", {"batch_size": 4, "threads": 0, "device": "cpu"})


def _load(worker, prompts: dict[str, object]) -> list[int]:
    """Prompts as `prepare` leaves them (a handle each, with its row's key)."""
    handles = []
    for key, prompt in prompts.items():
        handle = next(worker._handles)
        worker._prompts[handle], worker._keys[handle] = prompt, key
        handles.append(handle)
    return handles


def test_the_engine_fills_the_store_once_per_prompt_and_generates_as_without_it(worker):
    ad, f = worker.adapter, worker.adapter.family.factor
    prompts = {"a": ad.encode_prompt("<video> What moves?", videos=[clip(f, seed=1)]),
               "b": ad.encode_prompt("No media here."),
               "c": ad.encode_prompt("<image> Which?", images=[np.full((2 * f, 2 * f, 3), 60, dtype=np.uint8)])}
    handles = _load(worker, prompts)
    params = {"n": 3, "max_new_tokens": 6, "temperature": 1.0, "seeds": [1, 2, 3], "logprobs": True}
    worker.vision_passes.take()
    own = worker.generate_prepared(handles, params)
    assert worker.vision_passes.take() == 2
    store: dict = {}
    worker.share_features(store)
    try:
        assert worker.generate_prepared(handles, params) == own
        assert worker.vision_passes.take() == 2  # once per prompt with media, not once per sample
        assert sorted(store) == ["a", "c"] and all(v.dtype == torch.float32 for v in store.values())
        for key in store:  # what the rank's own `_encode` would have computed
            want = encode_visual(worker.engine.model, ad.collate([prompts[key]]).to("cpu", dtype=torch.float32))
            got = store[key]
            assert len(got) == sum(media_counts(prompts[key]).values())
            for kind in want.outputs:
                for a, b in zip(got.outputs[kind].pooler_output, want.outputs[kind].pooler_output, strict=True):
                    assert a.device.type == "cpu" and torch.equal(a, b)
        worker.vision_passes.take()  # the checks' own encodings
        greedy = {"n": 1, "max_new_tokens": 4, "temperature": 0.0}  # e.g. ReMax's baseline: the same prompts again
        worker.generate_prepared(handles, greedy)
        assert worker.vision_passes.take() == 0
        worker.release(handles)
        assert not worker._keys and sorted(store) == ["a", "c"]  # the rank clears the store, at its step's end
    finally:
        worker.features = None


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("colocated_vision")
    base = [f"run.root={tmp}", "run.name=colocated_vision", "tracking.enabled=false", "cache.workers=0",
            *letter_density_overrides(letter_density_data(tmp)), "model.tiny.family=qwen2_5_vl",
            "trainer.warmup_sft_steps=0", "trainer.prompts_per_step=4", "rollout.n=2", "trainer.steps=2",
            "trainer.world_size=2", "rollout.max_new_tokens=8", "trainer.save_every=0", "trainer.lr=0.01",
            "model.freeze_vision_tower=true"]
    cfg = load_config(ROOT / "conf/tiny.yaml", base)
    samples = pipeline.stage_ingest(cfg)
    model = pipeline.stage_model(cfg)
    frames = pipeline.stage_cache(cfg, samples, model)
    done = {}

    def run(placement: str):
        if placement not in done:
            c = load_config(ROOT / "conf/tiny.yaml", [*base, f"rollout.placement={placement}"])
            done[placement] = train(c, samples=read_samples(samples.uri, split="train"), frames_uri=frames.uri,
                                    model_dir=Path(model.uri), out_dir=tmp / placement)
        return done[placement]
    return run


@pytest.mark.slow
def test_a_frozen_tower_colocated_run_encodes_each_prompt_once_per_step(runs):
    colocated = runs("colocated")
    for h in colocated.history:
        assert h["perf/vision_passes_per_prompt"] == 1.0, h
        assert h["perf/rank_vision_passes"] == 0.0  # every prompt a rank trains on, its engine generated from
        # HF's behaviour log-probs are the trainer's (fp32 on the CPU, temperature 1)
        assert h["rollout/logprob_gap_max"] < 1e-4, h


@pytest.mark.slow
def test_shared_features_train_as_the_ranks_own_encoding(runs):
    """The separate engine and the ranks each encode (2 passes per prompt); same samples, same training."""
    colocated, separate = runs("colocated"), runs("separate")
    for got, want in zip(colocated.history, separate.history, strict=True):
        assert want["perf/vision_passes_per_prompt"] == 2.0
        for key in LOSS_KEYS:
            assert got[key] == pytest.approx(want[key], rel=1e-5, abs=1e-6), key
        assert want["rollout/logprob_gap_max"] < 1e-4
