"""Limits checked when a config is loaded rather than at the first forward on a GPU (issue 33): Ulysses
sequence parallelism (heads divisible by the degree, one sequence per micro-batch)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evr1.config import ConfigError, load_config

ROOT = Path(__file__).resolve().parents[2]
SP = ["trainer.world_size=4", "trainer.sequence_parallel=4", "trainer.micro_batch_size=1",
      "trainer.prompts_per_step=2", "rollout.n=2"]


def _load(*overrides):
    return load_config(ROOT / "conf/tiny.yaml", list(overrides))


def _one_line(err) -> str:
    text = str(err.value)
    assert "\n" not in text.strip()
    return text


def test_sequence_parallel_with_divisible_heads_loads():
    cfg = _load(*SP)  # the tiny model's 4 heads over 4 ranks
    assert cfg.trainer.sequence_parallel == 4


def test_heads_not_divisible_by_the_degree_are_refused_naming_the_keys():
    with pytest.raises((ConfigError, ValueError)) as err:
        _load(*SP, "model.tiny.sizes={num_attention_heads: 2, num_key_value_heads: 1}")
    text = _one_line(err)
    assert "sequence_parallel (4)" in text and "model.tiny.sizes.num_attention_heads" in text and "(2," in text


def test_key_value_heads_need_not_divide():
    # 4 query heads, 1 key/value head over 2 ranks: Ulysses repeats the kv head (tested in
    # tests/train/test_sequence_parallel.py), so this loads.
    cfg = _load(*SP[2:], "trainer.world_size=2", "trainer.sequence_parallel=2",
                "model.tiny.sizes={num_attention_heads: 4, num_key_value_heads: 1}")
    assert cfg.trainer.sequence_parallel == 2


@pytest.mark.parametrize("nested", [True, False])
def test_a_model_folder_is_read_for_its_heads(tmp_path, nested):
    """Qwen2.5-VL-7B: 28 heads; sp 8 fails at load, naming the file; sp 4 loads. Qwen3-VL nests them."""
    text = {"num_attention_heads": 28, "num_key_value_heads": 4}
    hf = {"model_type": "qwen3_vl", "text_config": text} if nested else {"model_type": "qwen2_5_vl", **text}
    (tmp_path / "config.json").write_text(json.dumps(hf))
    base = [f"model.path={tmp_path}", "model.tiny=null", "trainer.micro_batch_size=1", "rollout.n=2",
            "trainer.prompts_per_step=4"]
    with pytest.raises((ConfigError, ValueError)) as err:
        _load(*base, "trainer.world_size=8", "trainer.sequence_parallel=8")
    text = _one_line(err)
    assert "(28, num_attention_heads in" in text and "config.json" in text
    assert _load(*base, "trainer.world_size=4", "trainer.sequence_parallel=4").trainer.sequence_parallel == 4


def test_a_model_folder_not_on_this_machine_is_not_read(tmp_path):
    cfg = _load(f"model.path={tmp_path / 'elsewhere'}", "model.tiny=null", "trainer.world_size=8",
                "trainer.sequence_parallel=8", "trainer.micro_batch_size=1", "rollout.n=2", "trainer.prompts_per_step=4")
    assert cfg.trainer.sequence_parallel == 8  # checked at the first forward instead


@pytest.mark.parametrize("override", ["trainer.micro_batch_size=2", "trainer.max_tokens_per_micro_batch=4096"])
def test_padded_micro_batches_under_sequence_parallel_are_refused(override):
    with pytest.raises((ConfigError, ValueError)) as err:
        _load(*SP, override)
    text = _one_line(err)
    assert "trainer.micro_batch_size 1" in text and "trainer.max_tokens_per_micro_batch" in text


def test_the_long_video_config_passes_its_limits():
    cfg = load_config(ROOT / "conf/long_video.yaml")
    assert cfg.trainer.sequence_parallel == 8 and cfg.trainer.micro_batch_size == 1
