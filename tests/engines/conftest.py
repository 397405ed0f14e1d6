"""A tiny Qwen2.5-VL and Qwen3-VL checkpoint, built once per session."""

from __future__ import annotations

import numpy as np
import pytest

from evr1.models import make_tiny
from evr1.video.clip import VideoClip


@pytest.fixture(scope="session")
def engine_dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("engine_models")
    return {fam: make_tiny(fam, root / fam, seed=1) for fam in ("qwen2_5_vl", "qwen3_vl")}


def clip(factor: int, seed: int, t: int = 4) -> VideoClip:
    frames = np.random.default_rng(seed).integers(0, 256, (t, 2 * factor, 2 * factor, 3), dtype=np.uint8)
    return VideoClip(frames=frames, fps=2.0, frame_indices=list(range(0, 2 * t, 2)), total_frames=2 * t, duration=t)
