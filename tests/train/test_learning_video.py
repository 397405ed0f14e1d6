"""RL alone teaches the tiny model something about the videos it is shown (issue 12's short check).

`conf/learning.yaml` narrowed to its easiest family, `screen_colour` (each 4-second clip is one of
four colours, asked as multiple choice, chance 1/4), through the real trainer: the Lance frame cache,
Ray, FSDP2 on 2 ranks, HF generation. The warm-up trains on answers drawn uniformly from A–D, so it
teaches the answer tags and nothing about which letter is right: held-out accuracy after it is at
chance, and everything above that is RL's doing. docs/learning.md has the four-family run.

Measured with the current conf/learning.yaml (Dr. GRPO's unscaled advantage, no format term,
batches stratified by family: one family here), 100 RL steps of 16 clips × 8 responses, the frozen
tower, `</answer>` stop, fresh RL optimizer and a 60-step warm-up, run seed 0: held-out 0.19 after
the warm-up, 0.81 after RL; train accuracy 0.24 on the first 10 steps, 0.75 on the last 10 (809 s
while a CI run loaded the machine; about 150 s alone). With the previous config (std-normalised
advantages, format weight 0.1), seeds 1 and 2 gave 0.81 and 0.81. The first rise comes at a step that
varies from seed to seed, so the test gives it 100. Those figures predate the HF engine's batched
per-prompt sampler (evr1/engines/row_sampler.py), which draws other samples from the same seeds;
the test passed with it (tests/train, 2026-11-27) and was not remeasured with a print. No test split here (`data.synth.test=0`): the
test asserts on the held-out split it validates on, and says so.
"""

from pathlib import Path

import numpy as np
import pytest

from evr1.config import load_config
from tests.train.conftest import train_through_stages

ROOT = Path(__file__).resolve().parents[2]
CHANCE = 0.25


@pytest.mark.slow
# The suite's 900 s limit is a hang guard; this test trains 160 steps and took 809-909 s on this
# 2-core machine while another run loaded it (about 150 s alone). Its assertions are unchanged.
@pytest.mark.timeout(1800)
def test_rl_lifts_held_out_accuracy_on_an_easy_video_family(tmp_path):
    cfg = load_config(ROOT / "conf/learning.yaml", [
        f"run.root={tmp_path}", "run.name=learn-video", "tracking.enabled=false", "cache.workers=0",
        "data.synth.kinds=[screen_colour]", "data.synth.n=160", "data.synth.heldout=32", "data.synth.test=0",
        "trainer.steps=100", "trainer.val_every=50", "trainer.prompts_per_step=16", "rollout.n=8",
        "trainer.mini_batch_size=null", "trainer.ppo_epochs=1", "trainer.save_every=0", "trainer.warmup_sft_steps=60",
    ])
    result = train_through_stages(cfg, tmp_path / "ckpt", validate=True)

    before = result.before_rl["val/accuracy/screen_colour"]
    after = result.history[-1]["val/accuracy/screen_colour"]
    train_acc = np.array([h["reward/accuracy/screen_colour"] for h in result.history])
    assert len(train_acc) == 100
    print(f"held-out {before:.3f} -> {after:.3f}; train accuracy first 10 {train_acc[:10].mean():.3f}, "
          f"last 10 {train_acc[-10:].mean():.3f}")
    assert before < CHANCE + 0.2, f"the warm-up revealed answers: held-out {before:.3f} before RL"
    assert after >= 0.6, f"held-out accuracy {before:.3f} → {after:.3f} after 100 RL steps"
    assert train_acc[-10:].mean() > train_acc[:10].mean() + 0.25, train_acc.round(3).tolist()
