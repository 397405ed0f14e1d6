"""`evr1 plan --gpus N`: the run's own placement check against a cluster described on the command line."""

from pathlib import Path

from typer.testing import CliRunner

from evr1.cli.main import app

ROOT = Path(__file__).resolve().parents[2]


def test_plan_refuses_a_placement_the_cluster_cannot_hold_and_accepts_one_it_can():
    runner = CliRunner()
    config = str(ROOT / "conf/qwen3vl_8b.yaml")
    refused = runner.invoke(app, ["plan", config, "--separate", "--gpus", "8"])
    assert refused.exit_code == 1
    assert ("needs 9 GPUs (8 policy ranks + 1 rollout worker, rollout.placement=separate), the cluster has 8: "
            "set rollout.placement=colocated or trainer.world_size=7") in refused.output
    fits = runner.invoke(app, ["plan", config, "--gpus", "8"])  # colocated on cuda: 8 GPUs for 8 ranks
    assert fits.exit_code == 0, fits.output
    assert "placement: fits 8 GPUs (1 node)" in fits.output
    split = runner.invoke(app, ["plan", config, "--gpus", "8", "--gpus-per-node", "4"])
    assert split.exit_code == 0 and "placement: fits 8 GPUs (2 nodes)" in split.output
