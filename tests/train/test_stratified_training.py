"""Stratified batches through the real trainer (data.stratify, evr1/train/prompt_source.py): every
step draws each task family in its share, the adaptive weights are logged, and a run stopped after
step 2 and resumed draws step 3 exactly as a run that never stopped (the source's state rides in the
checkpoint)."""

from __future__ import annotations

from collections import Counter

import pytest

from evr1.config import load_config
from evr1.train import checkpoint as ckpt_io
from tests.train.conftest import train_through_stages
from tests.train.test_learning_video import ROOT

BASE = ["tracking.enabled=false", "cache.workers=0", "trainer.world_size=1", "trainer.warmup_sft_steps=0",
        "data.synth.kinds=[screen_colour,motion]", "data.synth.n=24", "data.synth.heldout=4",
        "trainer.prompts_per_step=4", "rollout.n=2", "rollout.max_new_tokens=4", "trainer.save_every=1",
        "data.stratify.by=family", "data.stratify.weights=adaptive", "trainer.val_every=0"]


def _cfg(tmp_path, name: str, steps: int):
    return load_config(ROOT / "conf" / "tiny.yaml", [f"run.root={tmp_path}", f"run.name={name}",
                                                     f"trainer.steps={steps}", *BASE])


@pytest.mark.slow
def test_each_step_holds_every_family_and_a_resume_draws_as_if_never_stopped(tmp_path):
    straight = train_through_stages(_cfg(tmp_path, "s", 3), tmp_path / "straight")
    for h in straight.history:  # equal shares of a 4-prompt batch over 2 families (all groups tie at first)
        assert h["data/stratum_weight/screen_colour"] == pytest.approx(0.5)
        assert h["data/stratum_weight/motion"] == pytest.approx(0.5)
    state = ckpt_io.read_state(ckpt_io.latest_checkpoint(tmp_path / "straight"))
    drawn = state["cursor"]["stratified"]
    assert sorted(drawn["values"]) == ["motion", "screen_colour"]
    assert sum(c[1] for c in drawn["cursors"].values()) == 3 * 4  # 3 steps × 4 prompts, 6 of each family
    assert Counter({v: c[1] for v, c in drawn["cursors"].items()}) == Counter(motion=6, screen_colour=6)
    assert set(drawn["observed"]) == {"1", "2", "3"}

    train_through_stages(_cfg(tmp_path, "s", 2), tmp_path / "resumed")
    resumed = train_through_stages(_cfg(tmp_path, "s", 3), tmp_path / "resumed")
    assert [h["step"] for h in resumed.history] == [1, 2, 3]
    again = ckpt_io.read_state(ckpt_io.latest_checkpoint(tmp_path / "resumed"))
    assert again["cursor"] == state["cursor"]
    for key in ("reward/overall", "response/length_mean", "data/stratum_weight/motion"):
        assert resumed.history[-1][key] == straight.history[-1][key], key
