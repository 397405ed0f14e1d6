"""The `data`, `data.synth`, `data.stratify` and `cache` sections: what is read, how training batches
are drawn from it, and how its frames are sampled and stored."""

from __future__ import annotations

import math
from dataclasses import fields
from typing import Literal

from pydantic import Field, model_validator

from evr1.config.base import Section
from evr1.video.clip import FrameParams


class SynthConfig(Section):
    """Generate a synthetic video QA set into the run folder instead of reading `data.train_files`."""

    n: int = Field(48, ge=2)
    heldout: int = Field(16, ge=1)
    seed: int = 0
    image_fraction: float = Field(0.1, ge=0.0, le=1.0)
    size: tuple[int, int] = (64, 64)
    fps: int = 8
    seconds: float = 2.0
    # Only these kinds, in equal shares (e.g. the learning task's colour, direction, flashes, appears:
    # evr1/data/synth_tasks.py); empty: the default mix of every video kind plus `image_fraction` images.
    kinds: list[str] = []
    # A test split of this many items (kinds in equal shares, like the other splits), from seeds of
    # its own and pixel-distinct from the train and held-out items, written beside them as
    # test.jsonl: scored once at the end, never used for validation during training. 0: none.
    test: int = Field(0, ge=0)


class StratifyConfig(Section):
    """Training batches that hold each value of a sample field in proportion to weights
    (evr1/train/prompt_source.py, `StratifiedSource`)."""

    # A sample field (a column such as `problem_type`, or a record field kept in `extra` such as
    # `synth_kind` or `data_source`), or `family`: the task family of the per-family metrics
    # (`synth_kind` when a sample has one, else its problem type).
    by: str
    # equal: every value an equal share; a mapping value → relative weight (values it does not name
    # weigh 1); adaptive: value v weighs (1 − z̄_v) + floor, z̄_v the moving average of the share of
    # its groups with zero advantage (all responses rewarded alike), so a family that teaches nothing
    # is drawn less, never dropped.
    weights: Literal["equal", "adaptive"] | dict[str, float] = "equal"
    floor: float = Field(0.1, gt=0.0)
    smoothing: float = Field(0.1, gt=0.0, le=1.0)  # the moving average's factor per observed step

    @model_validator(mode="after")
    def _weights(self) -> "StratifyConfig":
        if isinstance(self.weights, dict):
            bad = {v: w for v, w in self.weights.items() if not math.isfinite(w) or w < 0}
            if bad or not any(w > 0 for w in self.weights.values()):
                raise ValueError(f"data.stratify.weights: each ≥ 0 and finite, one > 0 (got {self.weights})")
        return self


class DataConfig(Section):
    train_files: list[str] = []
    eval_files: list[str] = []  # the held-out split: validation during training, the `heldout` benchmark
    # A test split: ingested and cached with the others, never read by training or validation, scored
    # once at the end by the `test` benchmark (add it to eval.benchmarks). Choose configs on `heldout`,
    # report `test`. data.synth.test fills it for a synthetic set.
    test_files: list[str] = []
    # Relative media paths are joined to this root; paths escaping it are rejected at ingestion.
    data_root: str | None = None
    synth: SynthConfig | None = None
    check_media_exists: bool = True
    # Longest prompt (text plus vision tokens, counted with the model family's rules) a record may
    # have; longer ones go to the rejects at ingestion with their length, and are refused again when
    # a prompt is built. Also capped by the model's positions minus rollout.max_new_tokens.
    max_prompt_tokens: int = Field(8192, ge=1)
    # Mixed offline-online training (EasyVideoR1 §4.5): the record field holding a pre-collected
    # trajectory (a string, the whole response text); with `has_offline_trajectory` true it replaces
    # the last of the sample's n responses (algorithm.offline_ratio of such samples). None: off.
    offline_key: str | None = None
    # Batches stratified by a sample field (e.g. `by: family`); None: every sample once per epoch.
    stratify: StratifyConfig | None = None

    @model_validator(mode="after")
    def _has_source(self) -> "DataConfig":
        if self.synth is None and not self.train_files:
            raise ValueError("data: set either data.train_files or data.synth")
        return self


class CacheConfig(Section):
    """Frame sampling and resizing (qwen-vl-utils rules) and the Lance frame cache."""

    enabled: bool = True
    mode: Literal["prefer-cache", "cache-only", "decode-only"] = "prefer-cache"
    fps: float = Field(2.0, gt=0.0)
    max_frames: int = Field(768, ge=1)
    min_frames: int = Field(4, ge=1)
    nframes: int | None = Field(None, ge=1)
    min_pixels: int | None = Field(None, ge=1)
    max_pixels: int | None = Field(None, ge=1)
    total_pixels: int | None = Field(None, ge=1)
    rules: Literal["0.0.14", "0.0.8"] = "0.0.14"
    image_min_pixels: int | None = Field(None, ge=1)
    image_max_pixels: int | None = Field(None, ge=1)
    workers: int = Field(2, ge=0)
    timeout_s: float = Field(120.0, gt=0.0)
    # A media file that could not be hashed in time or decoded is remembered with its reason (per run
    # folder, by path, size and mtime) and rejected again by later builds without trying it; true: try
    # every such file again (a timeout is also tried again whenever cache.timeout_s has grown).
    retry_failed: bool = False
    # Lance URI of the frames table; defaults to <run folder>/lance/frames-v<store format>. Point several runs at one
    # shared URI (local or object storage) to reuse decoded frames across runs.
    uri: str | None = None

    @model_validator(mode="after")
    def _min_below_max(self) -> "CacheConfig":
        for low, high in (("min_frames", "max_frames"), ("min_pixels", "max_pixels"),
                          ("image_min_pixels", "image_max_pixels")):
            a, b = getattr(self, low), getattr(self, high)
            if a is not None and b is not None and a > b:
                raise ValueError(f"cache: {low} ({a}) must not exceed {high} ({b})")
        return self

    def frame_params(self, factor: int) -> FrameParams:
        """The sampling/resize parameters for a model family's resize factor (part of the cache key)."""
        names = [f.name for f in fields(FrameParams) if f.name != "factor"]
        return FrameParams(factor=factor, **{name: getattr(self, name) for name in names})
