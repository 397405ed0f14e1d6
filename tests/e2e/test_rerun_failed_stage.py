"""Re-running a flow whose cache stage failed re-executes only the stages that did not finish: ingest is
not run again (its Lance tables keep their version), the fixed stage and everything after it run."""

from pathlib import Path

import lance
import pytest
from prefect.states import State

from evr1.models import make_tiny

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.e2e
def test_rerun_after_a_failed_stage_skips_finished_ones(tmp_path, prefect_harness, monkeypatch):
    from flows.train_and_eval import train_and_eval

    monkeypatch.chdir(ROOT)
    model_dir = tmp_path / "model-arrives-later"
    overrides = [f"run.root={tmp_path}", "run.name=rerun", "data.synth.n=4", "data.synth.heldout=2",
                 f"model.path={model_dir}", "trainer.steps=1", "trainer.warmup_sft_steps=0",
                 "trainer.prompts_per_step=2", "rollout.n=2",
                 "trainer.world_size=1", "rollout.max_new_tokens=4", "eval.max_new_tokens=4", "cache.workers=0"]

    first: State = train_and_eval("conf/tiny.yaml", overrides, return_state=True)
    assert first.is_failed()
    samples = tmp_path / "rerun" / "lance" / "samples"
    version_after_first = lance.dataset(str(samples)).version

    make_tiny("qwen2_5_vl", model_dir, seed=1)  # the cause is fixed: the model now exists
    results = train_and_eval("conf/tiny.yaml", overrides)
    assert lance.dataset(str(samples)).version == version_after_first, "ingest ran again"
    assert results["ingest"].metrics["accepted"] == 4  # n counts both splits
    assert Path(results["merge"].uri).exists() and results["eval"].metrics["heldout/coverage"] == 1.0
