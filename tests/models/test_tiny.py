"""make_tiny: offline-loadable, deterministic, small."""

from __future__ import annotations

import hashlib

import pytest
import torch
from transformers import AutoModelForImageTextToText, AutoTokenizer

from evr1.models import FAMILIES, family_of, make_tiny

from .conftest import FAMILY_NAMES


def _digest(directory) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(directory.iterdir())}


@pytest.mark.parametrize("family", FAMILY_NAMES)
def test_loads_with_auto_classes_offline(tiny_dirs, family):
    d = tiny_dirs[family]
    model = AutoModelForImageTextToText.from_pretrained(d, local_files_only=True)
    tok = AutoTokenizer.from_pretrained(d, local_files_only=True)
    assert type(model).__name__ == FAMILIES[family].model_class
    assert family_of(d) is FAMILIES[family]
    # the special tokens are single, never-split tokens and the chat template is saved with the tokenizer
    for special in ["<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>"]:
        assert len(tok.encode(special, add_special_tokens=False)) == 1
    assert tok.chat_template
    assert model.config.video_token_id == tok.convert_tokens_to_ids("<|video_pad|>")
    for name in ["preprocessor_config.json", "video_preprocessor_config.json", "generation_config.json"]:
        assert (d / name).is_file()


@pytest.mark.parametrize("family", FAMILY_NAMES)
def test_same_seed_gives_identical_files_and_other_seed_other_weights(tmp_path, family):
    a = make_tiny(family, tmp_path / "a", seed=3)
    b = make_tiny(family, tmp_path / "b", seed=3)
    c = make_tiny(family, tmp_path / "c", seed=4)
    assert _digest(a) == _digest(b)
    da, dc = _digest(a), _digest(c)
    assert da["model.safetensors"] != dc["model.safetensors"]
    assert da["tokenizer.json"] == dc["tokenizer.json"]


@pytest.mark.parametrize("family", FAMILY_NAMES)
def test_checkpoint_is_small(tiny_dirs, family):
    total = sum(p.stat().st_size for p in tiny_dirs[family].iterdir())
    assert total < 5 * 2**20


def test_size_overrides_change_the_model(tmp_path):
    d = make_tiny("qwen2_5_vl", tmp_path / "m", hidden_size=96, num_hidden_layers=3)
    model = AutoModelForImageTextToText.from_pretrained(d, local_files_only=True)
    assert model.config.text_config.hidden_size == 96
    assert model.config.text_config.num_hidden_layers == 3
    out = model(input_ids=torch.tensor([[1, 2, 3]]), mm_token_type_ids=torch.zeros(1, 3, dtype=torch.long))
    assert out.logits.shape[-1] == model.config.text_config.vocab_size


def test_bad_requests_are_named(tmp_path):
    with pytest.raises(ValueError, match="family 'llama'"):
        make_tiny("llama", tmp_path / "x")
    with pytest.raises(ValueError, match="hidden_sise"):
        make_tiny("qwen3_vl", tmp_path / "y", hidden_sise=8)
    with pytest.raises(ValueError, match="model_type='llama'"):
        family_of({"model_type": "llama"})
