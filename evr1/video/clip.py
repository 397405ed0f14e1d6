"""The unit that travels between decoding, the frame cache, the model processors and the engines."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass(frozen=True)
class FrameParams:
    """Everything that decides which frames are sampled and how they are resized.

    Part of the frame-cache key: change any field and a cached entry no longer matches.
    `factor` is patch size × spatial merge (28 for Qwen2/2.5-VL, 32 for Qwen3-VL / Qwen3.5).
    """

    fps: float = 2.0
    max_frames: int = 768
    min_frames: int = 4
    nframes: int | None = None
    min_pixels: int | None = None
    max_pixels: int | None = None
    total_pixels: int | None = None
    factor: int = 28
    rules: str = "0.0.14"
    image_min_pixels: int | None = None
    image_max_pixels: int | None = None


@dataclass
class VideoClip:
    """Sampled, resized uint8 frames plus the metadata every stage needs to build identical inputs.

    `frames` is T×H×W×3 uint8 (RGB). `fps` is the video's NATIVE frame rate and `frame_indices`
    the native indices of the kept frames: Qwen3-VL timestamps are index / fps.
    """

    frames: np.ndarray
    fps: float
    frame_indices: list[int]
    total_frames: int
    duration: float
    extra: dict = field(default_factory=dict)

    @property
    def num_frames(self) -> int:
        return int(self.frames.shape[0])
