"""Stage cache keys: a change re-runs exactly the stages it affects."""

import os
from pathlib import Path

from evr1.config import load_config
from evr1.pipeline import stage_key
from evr1.results import StageResult

ROOT = Path(__file__).resolve().parents[1]


def _keys(tmp_path, *overrides):
    cfg = load_config(ROOT / "conf/tiny.yaml", [f"run.root={tmp_path}", *overrides])
    up = [StageResult(stage="x", uri="u", content_hash="h")]
    return {stage: stage_key(stage, cfg, up) for stage in ("ingest", "model", "cache", "train", "merge", "eval")}


def test_each_change_reaches_only_its_stages(tmp_path):
    base = _keys(tmp_path)
    assert base == _keys(tmp_path)  # stable
    eval_change = _keys(tmp_path, "eval.max_new_tokens=7")
    assert [s for s in base if base[s] != eval_change[s]] == ["eval"]
    algo_change = _keys(tmp_path, "algorithm.clip_ratio_high=0.28")
    assert [s for s in base if base[s] != algo_change[s]] == ["train"]


def test_an_edited_data_file_misses(tmp_path):
    data = tmp_path / "train.jsonl"
    data.write_text("{}\n")
    override = f'data={{"train_files": ["{data}"]}}'
    before = _keys(tmp_path, override)["ingest"]
    data.write_text("{}\n{}\n")
    os.utime(data, ns=(1, 1))
    assert _keys(tmp_path, override)["ingest"] != before
