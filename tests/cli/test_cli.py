"""The `evr1` command: the offline helpers and config printing, run through Typer's test runner."""

import json
from pathlib import Path

import yaml
from typer.testing import CliRunner
from transformers import AutoModelForImageTextToText

from evr1.cli.main import app

ROOT = Path(__file__).resolve().parents[2]
runner = CliRunner()


def test_config_prints_the_resolved_config_with_overrides():
    result = runner.invoke(app, ["config", str(ROOT / "conf/tiny.yaml"), "trainer.steps=3"])
    assert result.exit_code == 0, result.output
    data = yaml.safe_load(result.output)
    assert data["trainer"]["steps"] == 3 and data["algorithm"]["adv_estimator"] == "grpo"


def test_a_config_error_exits_2_and_names_the_key():
    result = runner.invoke(app, ["config", str(ROOT / "conf/tiny.yaml"), "trainer.stepz=3"])
    assert result.exit_code == 2 and "trainer.stepz" in result.output


def test_make_tiny_and_synth(tmp_path):
    result = runner.invoke(app, ["make-tiny", str(tmp_path / "m"), "--family", "qwen2_5_vl", "--seed", "3"])
    assert result.exit_code == 0, result.output
    assert AutoModelForImageTextToText.from_pretrained(tmp_path / "m").config.model_type == "qwen2_5_vl"
    result = runner.invoke(app, ["synth", str(tmp_path / "d"), "--n", "6", "--heldout", "2"])
    assert result.exit_code == 0, result.output
    train = (tmp_path / "d" / "train.jsonl").read_text().splitlines()
    assert len(train) == 4 and all("problem" in json.loads(line) for line in train)
