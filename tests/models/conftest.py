"""Tiny checkpoints of every buildable family, built once per test session."""

from __future__ import annotations

import numpy as np
import pytest

from evr1.models import load_adapter, load_model, make_tiny
from evr1.video.clip import VideoClip

FAMILY_NAMES = ["qwen2_vl", "qwen2_5_vl", "qwen3_vl", "qwen3_5"]


@pytest.fixture(scope="session")
def tiny_dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("tiny_models")
    return {fam: make_tiny(fam, root / fam, seed=0) for fam in FAMILY_NAMES}


@pytest.fixture(scope="session")
def adapters(tiny_dirs):
    return {fam: load_adapter(d) for fam, d in tiny_dirs.items()}


@pytest.fixture(scope="session")
def models(tiny_dirs):
    return {fam: load_model(d) for fam, d in tiny_dirs.items()}


def make_clip(factor: int, t: int = 4, h_blocks: int = 2, w_blocks: int = 3, *, fps: float = 4.0, seed: int = 0,
              indices: list[int] | None = None, total: int | None = None) -> VideoClip:
    """A random clip whose sides are multiples of `factor` (as the frame cache delivers them)."""
    rng = np.random.default_rng(seed)
    frames = rng.integers(0, 256, (t, h_blocks * factor, w_blocks * factor, 3), dtype=np.uint8)
    indices = indices if indices is not None else [2 * i for i in range(t)]
    total = total if total is not None else indices[-1] + 1
    return VideoClip(frames=frames, fps=fps, frame_indices=indices, total_frames=total, duration=total / fps)
