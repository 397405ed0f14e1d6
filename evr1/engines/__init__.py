"""evr1.engines: generation engines shared by rollout and eval (`hf` here, `vllm` on GPU workers).

Only the light types are imported here; engines are built by name through `make_engine`, which
imports their module on demand, so importing this package never imports vllm (or transformers).
"""

from evr1.engines.base import ENGINES, Engine, EngineBase, Generation, SamplingParams, engine_class, make_engine

__all__ = ["ENGINES", "Engine", "EngineBase", "Generation", "SamplingParams", "engine_class", "make_engine"]
