"""The run folder token that keys Prefect's stage cache: stable for a folder, new when it is rebuilt."""

import shutil
from pathlib import Path

from evr1.config import load_config
from evr1.pipeline import run_token

ROOT = Path(__file__).resolve().parents[2]


def test_token_is_stable_and_changes_when_the_folder_is_rebuilt(tmp_path):
    cfg = load_config(ROOT / "conf/tiny.yaml", [f"run.root={tmp_path}", "run.name=t"])
    first = run_token(cfg)
    assert run_token(cfg) == first and len(first) == 32
    shutil.rmtree(tmp_path / "t")
    assert run_token(cfg) != first


def test_relative_run_root_is_resolved_at_load(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cfg = load_config(ROOT / "conf/tiny.yaml", ["run.root=out"])
    assert cfg.run.root == str(tmp_path / "out") and cfg.run_dir() == tmp_path / "out" / "tiny"
