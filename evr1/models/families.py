"""Model-family table: the vision geometry and prompt rules each Qwen-VL generation uses.

One row per family instead of `if family == ...` branches. Values are the defaults a real
checkpoint ships; the adapter overrides geometry and mean/std from the model directory's
`preprocessor_config.json` / `video_preprocessor_config.json`, so a checkpoint with other values
still gets the right inputs.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from os import PathLike
from pathlib import Path
from typing import Any, Mapping

# transformers' OPENAI_CLIP_MEAN / OPENAI_CLIP_STD (what Qwen2-VL and Qwen2.5-VL ship).
CLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)
CLIP_STD = (0.26862954, 0.26130258, 0.27577711)
HALF = (0.5, 0.5, 0.5)


@dataclass(frozen=True)
class Family:
    """Static facts about one model family (see easyvideor1-spec §3.1 and §3.4)."""

    name: str
    model_types: tuple[str, ...]
    model_class: str  # the transformers class `make_tiny` instantiates
    config_class: str
    processor_class: str  # written into the processor configs, as real checkpoints do
    video_processor_type: str
    patch_size: int
    merge_size: int
    temporal_patch_size: int
    image_mean: tuple[float, float, float]
    image_std: tuple[float, float, float]
    timestamps: bool  # Qwen3-VL: a `<t.t seconds>` text before each temporal patch group
    second_per_grid_ts: bool  # Qwen2.5-VL: absolute-time mRoPE needs seconds per temporal patch
    frame_rules: str = "0.0.14"  # qwen-vl-utils version whose sampling rules apply

    @property
    def factor(self) -> int:
        """Frame sides must be multiples of this (patch × spatial merge)."""
        return self.patch_size * self.merge_size


_QWEN2_VL = Family(
    name="qwen2_vl",
    model_types=("qwen2_vl",),
    model_class="Qwen2VLForConditionalGeneration",
    config_class="Qwen2VLConfig",
    processor_class="Qwen2VLProcessor",
    video_processor_type="Qwen2VLVideoProcessor",
    patch_size=14,
    merge_size=2,
    temporal_patch_size=2,
    image_mean=CLIP_MEAN,
    image_std=CLIP_STD,
    timestamps=False,
    second_per_grid_ts=False,
)
# Each later family lists only what it changes.
_QWEN2_5_VL = replace(
    _QWEN2_VL, name="qwen2_5_vl", model_types=("qwen2_5_vl",), model_class="Qwen2_5_VLForConditionalGeneration",
    config_class="Qwen2_5_VLConfig", processor_class="Qwen2_5_VLProcessor", second_per_grid_ts=True,
)
_QWEN3_VL = replace(
    _QWEN2_VL, name="qwen3_vl", model_types=("qwen3_vl", "qwen3_vl_moe"), model_class="Qwen3VLForConditionalGeneration",
    config_class="Qwen3VLConfig", processor_class="Qwen3VLProcessor", video_processor_type="Qwen3VLVideoProcessor",
    patch_size=16, image_mean=HALF, image_std=HALF, timestamps=True,
)
# Qwen3.5 reuses Qwen3-VL's vision tower, processor and timestamp layout (transformers maps it to
# Qwen3VLProcessor); its decoder is a hybrid of linear (gated delta net) and full attention.
_QWEN3_5 = replace(
    _QWEN3_VL, name="qwen3_5", model_types=("qwen3_5", "qwen3_5_moe"), model_class="Qwen3_5ForConditionalGeneration",
    config_class="Qwen3_5Config",
)

FAMILIES: dict[str, Family] = {f.name: f for f in (_QWEN2_VL, _QWEN2_5_VL, _QWEN3_VL, _QWEN3_5)}

_BY_MODEL_TYPE = {mt: fam for fam in FAMILIES.values() for mt in fam.model_types}


def family_of(model_dir_or_config: str | PathLike | Mapping[str, Any] | Any) -> Family:
    """The family of a model directory, a config.json dict, a transformers config or a family name."""
    source = model_dir_or_config
    if isinstance(source, str) and source in FAMILIES:
        return FAMILIES[source]
    if isinstance(source, (str, PathLike)):
        path = Path(source)
        config_path = path / "config.json" if path.is_dir() else path
        if not config_path.is_file():
            raise FileNotFoundError(f"{source}: no config.json (expected a model directory or a family name)")
        model_type = json.loads(config_path.read_text()).get("model_type")
    elif isinstance(source, Mapping):
        model_type = source.get("model_type")
    else:
        model_type = getattr(source, "model_type", None)
    if model_type not in _BY_MODEL_TYPE:
        raise ValueError(
            f"{source!r}: config field model_type={model_type!r} is not a supported family "
            f"(known: {sorted(_BY_MODEL_TYPE)})"
        )
    return _BY_MODEL_TYPE[model_type]
