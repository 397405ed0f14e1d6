"""The `model` section: a Hugging Face model folder, or a tiny random-weight one built offline."""

from __future__ import annotations

from typing import Literal

from pydantic import field_validator, model_validator

from evr1.config.base import Section, refuse_hub_id


class TinyModelConfig(Section):
    family: Literal["qwen2_vl", "qwen2_5_vl", "qwen3_vl"] = "qwen3_vl"
    seed: int = 0
    # Overrides of evr1.models.tiny.DEFAULT_SIZES (hidden_size, num_hidden_layers, vision_depth, …);
    # vLLM's CPU attention needs head_dim ≥ 32: {num_attention_heads: 2, num_key_value_heads: 1}.
    sizes: dict[str, int] = {}
    # "prompt_dependent": weights drawn wide enough that greedy outputs depend on the prompt (for
    # comparing engines); "default": transformers' init (every prompt gives the same tokens).
    init: Literal["default", "prompt_dependent"] = "default"

    @field_validator("sizes")
    @classmethod
    def _known_sizes(cls, value: dict[str, int]) -> dict[str, int]:
        from evr1.models.tiny import DEFAULT_SIZES

        unknown = sorted(set(value) - set(DEFAULT_SIZES))
        if unknown:
            raise ValueError(f"model.tiny.sizes: unknown {unknown}; known: {sorted(DEFAULT_SIZES)}")
        return value


class ModelConfig(Section):
    # A Hugging Face model directory (a hub id is refused: download it first, see `refuse_hub_id`). When
    # unset, a tiny random-weight model of `tiny.family` is built offline into the run folder.
    path: str | None = None
    tiny: TinyModelConfig | None = None
    dtype: Literal["float32", "bfloat16", "float16"] = "float32"
    attn_implementation: str = "sdpa"
    gradient_checkpointing: bool = False
    # Keep the vision tower's weights as loaded (EasyVideoR1's freeze_vision_tower): no gradients,
    # no optimizer state, and its features are computed without a graph.
    freeze_vision_tower: bool = False

    @model_validator(mode="after")
    def _has_model(self) -> "ModelConfig":
        if self.path is None and self.tiny is None:
            raise ValueError("model: set either model.path or model.tiny")
        refuse_hub_id(self.path, "model.path")
        return self
