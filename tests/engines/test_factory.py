"""make_engine gives each engine only the keywords it accepts, and HFEngine picks its device.

The rollout worker and eval call `make_engine(name, model_dir=..., batch_size=..., dtype=..., device=...)`
whatever the engine; vLLM's `from_pretrained` has no `batch_size` and forwards extra keywords to
`vllm.LLM`, which rejects it. The fake engines below are registered in ENGINES for one test each and
have the two shapes of `from_pretrained` that matter: closed, and with a `**extra` catch-all.
"""

from __future__ import annotations

import pytest
import torch

from evr1.engines import ENGINES, make_engine
from evr1.engines.base import COMMON_KWARGS, EngineBase, engine_kwargs
from evr1.engines.hf import HFEngine, resolve_device


class ClosedEngine(EngineBase):
    """Knows `dtype` and `seed` only: no batch_size, no device."""

    def __init__(self, **got):
        self.got = got

    @classmethod
    def from_pretrained(cls, model_dir, *, dtype: str = "bfloat16", seed: int = 0):
        return cls(model_dir=model_dir, dtype=dtype, seed=seed)

    def generate(self, prompts, params):
        return []


class CatchAllEngine(ClosedEngine):
    """Like VLLMEngine: named keywords plus `**extra` forwarded to a library that validates them."""

    @classmethod
    def from_pretrained(cls, model_dir, *, dtype: str = "bfloat16", **extra):
        return cls(model_dir=model_dir, dtype=dtype, **extra)


@pytest.fixture
def register(monkeypatch):
    def add(name: str, cls: type) -> None:
        monkeypatch.setitem(ENGINES, name, f"{__name__}:{cls.__name__}")

    return add


def test_common_keywords_an_engine_lacks_are_dropped(register):
    register("closed", ClosedEngine)
    eng = make_engine("closed", model_dir="/m", batch_size=8, dtype="float16", device="cuda", seed=3)
    assert eng.got == {"model_dir": "/m", "dtype": "float16", "seed": 3}


def test_unknown_keyword_is_a_type_error_naming_engine_and_keyword(register):
    register("closed", ClosedEngine)
    with pytest.raises(TypeError, match=r"engine 'closed': unknown keyword 'gpu_count'"):
        make_engine("closed", model_dir="/m", batch_size=8, gpu_count=2)


def test_a_catch_all_gets_engine_specific_keywords_but_never_the_common_ones(register):
    register("catchall", CatchAllEngine)
    eng = make_engine("catchall", model_dir="/m", batch_size=8, device="cpu", dtype="float32", enforce_eager=True)
    assert eng.got == {"model_dir": "/m", "dtype": "float32", "enforce_eager": True}
    assert COMMON_KWARGS == {"batch_size", "device", "dtype", "asynchronous"}  # vLLM alone takes asynchronous


def test_constructor_keywords_are_filtered_the_same_way(register):
    register("closed", ClosedEngine)  # no model_dir: built from its constructor, which takes **got
    assert make_engine("closed", batch_size=2, x=1).got == {"x": 1}


def test_hf_engine_device_auto_and_explicit(engine_dirs):
    auto = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    assert resolve_device(None) == auto
    assert resolve_device("cpu") == torch.device("cpu")
    eng = make_engine("hf", model_dir=str(engine_dirs["qwen2_5_vl"]), batch_size=1, dtype="float32", device=None)
    assert isinstance(eng, HFEngine) and eng.device.type == auto.type and eng.batch_size == 1
    cpu = make_engine("hf", model_dir=str(engine_dirs["qwen2_5_vl"]), device="cpu")
    assert cpu.device == torch.device("cpu")


def test_the_vllm_engine_gets_dtype_but_not_batch_size_or_device():
    from evr1.engines.vllm_engine import VLLMEngine  # imports vllm only inside from_pretrained

    got = engine_kwargs("vllm", VLLMEngine.from_pretrained,
                        {"batch_size": 8, "dtype": "bfloat16", "device": "cuda", "gpu_memory_utilization": 0.5})
    assert got == {"dtype": "bfloat16", "gpu_memory_utilization": 0.5}
