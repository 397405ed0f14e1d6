"""bf16 by default on a GPU, fp32 on the CPU, for the model loads evaluation and rollout make (issue 33,
item 9); an explicit `model.dtype` is kept. No GPU is needed: the resolution is tested."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from evr1.config import load_config
from evr1.models.runtime import configured_dtype, resolve_dtype

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("dtype, device, want", [
    ("auto", "cpu", "float32"),
    ("auto", "cuda", "bfloat16"),
    ("auto", "cuda:1", "bfloat16"),
    (None, "cpu", "float32"),
    (None, "cuda", "bfloat16"),
    ("float32", "cuda", "float32"),  # explicit: kept
    ("bfloat16", "cpu", "bfloat16"),
    ("bf16", "cuda", "bfloat16"),
    (torch.float16, "cuda", "float16"),
])
def test_resolution(dtype, device, want):
    assert resolve_dtype(dtype, device) == want


def test_no_device_means_this_process_s_gpu_if_any():
    assert resolve_dtype("auto", None) == ("bfloat16" if torch.cuda.is_available() else "float32")


@pytest.mark.parametrize("name", ["nightly.yaml", "eval_easyvideor1.yaml", "tiny.yaml"])
def test_configs_that_leave_model_dtype_unset_load_bf16_on_cuda_and_fp32_on_cpu(name):
    cfg = load_config(ROOT / "conf" / name)
    assert "dtype" not in cfg.model.model_fields_set
    assert configured_dtype(cfg.model, "cpu") == "float32"
    assert configured_dtype(cfg.model, "cuda") == "bfloat16"


def test_an_explicit_model_dtype_is_kept():
    cfg = load_config(ROOT / "conf/tiny.yaml", ["model.dtype=float32"])
    assert configured_dtype(cfg.model, "cuda") == "float32"
    cfg = load_config(ROOT / "conf/qwen3vl_8b.yaml")
    assert configured_dtype(cfg.model, "cuda") == "bfloat16" and configured_dtype(cfg.model, "cpu") == "bfloat16"


def test_evaluation_opens_its_engine_in_the_resolved_dtype(monkeypatch):
    """`open_engine` on a CUDA config that leaves model.dtype unset asks for bf16 (the engine is not built)."""
    from evr1.eval import evaluate

    asked = []
    monkeypatch.setattr(evaluate, "make_engine", lambda name, **kw: asked.append(kw["dtype"]) or object())
    cfg = load_config(ROOT / "conf/tiny.yaml", ["trainer.device=cuda"])
    evaluate.open_engine(cfg, Path("unused"), engine_name="hf")
    cfg = load_config(ROOT / "conf/tiny.yaml")
    evaluate.open_engine(cfg, Path("unused"), engine_name="hf")
    assert asked == ["bfloat16", "float32"]
