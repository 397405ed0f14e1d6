"""Random uint8 video clips of a given size, for benchmarks that measure compute (not decoding)."""

from __future__ import annotations

import numpy as np

from evr1.video.clip import VideoClip


def random_clip(frames: int, height: int, width: int, *, seed: int = 0, fps: float = 30.0, stride: int = 15) -> VideoClip:
    """`frames` random frames of height × width, sampled every `stride` source frames at `fps`."""
    rng = np.random.default_rng(seed)
    pixels = rng.integers(0, 256, (frames, height, width, 3), dtype=np.uint8)
    indices = [stride * i for i in range(frames)]
    return VideoClip(frames=pixels, fps=fps, frame_indices=indices, total_frames=indices[-1] + 1,
                     duration=(indices[-1] + 1) / fps)
