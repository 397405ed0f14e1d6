"""Frame-count, frame-index and resize rules, identical to qwen-vl-utils.

Two rule sets exist because the reference uses two versions of qwen-vl-utils (spec §3.1, §3.2):
"0.0.14" (training, Qwen3-VL eval) and "0.0.8" (Qwen2.5-VL eval). They differ only in how the
frame count is rounded/clamped and how a given `max_pixels` interacts with the total budget.
Everything here is pure integer/float arithmetic so that the cache, the trainer and eval compute
the same shapes without decoding anything.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

# Bump when any rule below changes: it is part of the frame-cache key, so old entries become misses.
RULES_VERSION = "qwen-vl-utils/0.0.14+0.0.8;evr1-2"  # evr1-2: torch antialiased bicubic for videos

MAX_RATIO = 200
FRAME_FACTOR = 2
FPS = 2.0
FPS_MIN_FRAMES = 4
FPS_MAX_FRAMES = 768
IMAGE_MIN_TOKENS = 4
IMAGE_MAX_TOKENS = 16384
VIDEO_MIN_TOKENS = 128
VIDEO_MAX_TOKENS = 768
# qwen-vl-utils 0.0.14 reads MODEL_SEQ_LEN once at import, default 128000; we read it per call.
DEFAULT_MODEL_SEQ_LEN = 128000


def round_by_factor(number: float, factor: int) -> int:
    """Nearest multiple of `factor`; Python's round, so exact halves go to the even multiple."""
    return round(number / factor) * factor


def ceil_by_factor(number: float, factor: int) -> int:
    return math.ceil(number / factor) * factor


def floor_by_factor(number: float, factor: int) -> int:
    return math.floor(number / factor) * factor


def smart_resize(
    height: int, width: int, *, factor: int, min_pixels: int | None = None, max_pixels: int | None = None
) -> tuple[int, int]:
    """Resize target with both sides multiples of `factor` and area in [min_pixels, max_pixels].

    Defaults are the image token bounds (4 and 16384 tokens of factor² pixels), as in qwen-vl-utils.
    """
    max_pixels = max_pixels if max_pixels is not None else IMAGE_MAX_TOKENS * factor**2
    min_pixels = min_pixels if min_pixels is not None else IMAGE_MIN_TOKENS * factor**2
    if max_pixels < min_pixels:
        raise ValueError(f"max_pixels ({max_pixels}) must be >= min_pixels ({min_pixels})")
    if height <= 0 or width <= 0:
        raise ValueError(f"height and width must be positive, got {height}x{width}")
    if max(height, width) / min(height, width) > MAX_RATIO:
        raise ValueError(
            f"absolute aspect ratio must be smaller than {MAX_RATIO}, got {max(height, width) / min(height, width)}"
        )
    h_bar = max(factor, round_by_factor(height, factor))
    w_bar = max(factor, round_by_factor(width, factor))
    if h_bar * w_bar > max_pixels:
        beta = math.sqrt((height * width) / max_pixels)
        h_bar = floor_by_factor(height / beta, factor)
        w_bar = floor_by_factor(width / beta, factor)
    elif h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h_bar = ceil_by_factor(height * beta, factor)
        w_bar = ceil_by_factor(width * beta, factor)
    return h_bar, w_bar


def image_size(
    height: int, width: int, *, factor: int, min_pixels: int | None = None, max_pixels: int | None = None
) -> tuple[int, int]:
    """Resize target for a still image: its own pixel bounds, never the video budget (fetch_image)."""
    return smart_resize(height, width, factor=factor, min_pixels=min_pixels, max_pixels=max_pixels)


# --- frame count -------------------------------------------------------------------------------


@dataclass(frozen=True)
class _FrameRule:
    """How one qwen-vl-utils version turns the fps-mode estimate into a frame count."""

    to_even: Callable[[float, int], int]  # rounding of the fps-mode count to FRAME_FACTOR
    clamp_to_total: bool  # 0.0.14 clamps to N before rounding; 0.0.8 does not (and may then raise)


_FRAME_RULES = {
    "0.0.14": _FrameRule(to_even=floor_by_factor, clamp_to_total=True),
    "0.0.8": _FrameRule(to_even=round_by_factor, clamp_to_total=False),
}


def _rule(rules: str, table: dict):
    try:
        return table[rules]
    except KeyError:
        raise ValueError(f"unknown rules {rules!r}; expected one of {sorted(table)}") from None


def smart_nframes(
    total_frames: int,
    video_fps: float,
    *,
    fps: float | None = None,
    nframes: int | None = None,
    min_frames: int | None = None,
    max_frames: int | None = None,
    rules: str = "0.0.14",
) -> int:
    """Number of frames to sample from a clip of `total_frames` at native `video_fps`.

    Either `nframes` (a fixed count, rounded to even) or the fps mode (`fps`, default 2, bounded by
    min/max frames). Raises ValueError unless 2 <= n <= total_frames, exactly as qwen-vl-utils does.
    """
    rule = _rule(rules, _FRAME_RULES)
    if fps is not None and nframes is not None:
        raise ValueError("Only accept either `fps` or `nframes`")
    if nframes is not None:
        n = round_by_factor(nframes, FRAME_FACTOR)
    else:
        if video_fps <= 0:
            raise ValueError(f"video_fps must be positive, got {video_fps}")
        target = FPS if fps is None else fps
        min_f = ceil_by_factor(FPS_MIN_FRAMES if min_frames is None else min_frames, FRAME_FACTOR)
        max_f = floor_by_factor(
            min(FPS_MAX_FRAMES, total_frames) if max_frames is None else max_frames, FRAME_FACTOR
        )
        n = total_frames / video_fps * target
        n = min(max(n, min_f), max_f)
        if rule.clamp_to_total:
            n = min(n, total_frames)
        n = rule.to_even(n, FRAME_FACTOR)
    if not (FRAME_FACTOR <= n <= total_frames):
        raise ValueError(f"nframes should in interval [{FRAME_FACTOR}, {total_frames}], but got {n}.")
    return int(n)


# --- frame indices -----------------------------------------------------------------------------


def frame_range(
    total_frames: int, video_fps: float, *, start: float | None = None, end: float | None = None
) -> tuple[int, int]:
    """First and last native frame index inside [start, end] seconds (calculate_video_frame_range)."""
    if video_fps <= 0:
        raise ValueError(f"video_fps must be positive, got {video_fps}")
    if total_frames <= 0:
        raise ValueError(f"total_frames must be positive, got {total_frames}")
    if start is None and end is None:
        return 0, total_frames - 1
    max_duration = total_frames / video_fps
    first = math.ceil(max(0.0, min(start, max_duration)) * video_fps) if start is not None else 0
    last = total_frames - 1
    if end is not None:
        last = min(math.floor(max(0.0, min(end, max_duration)) * video_fps), total_frames - 1)
    if first >= last:
        raise ValueError(f"invalid time range [{start}, {end}] s: start frame {first} >= end frame {last}")
    return first, last


def sample_frame_indices(
    total_frames: int, n_frames: int, *, video_fps: float, start: float | None = None, end: float | None = None
) -> list[int]:
    """`n_frames` evenly spaced native indices, linspace then round (torch's round is half-to-even too)."""
    first, last = frame_range(total_frames, video_fps, start=start, end=end)
    return [int(i) for i in np.rint(_linspace_f32(first, last, n_frames))]


def _linspace_f32(first: int, last: int, n: int) -> np.ndarray:
    """torch.linspace's float32 CPU arithmetic (first half from the start, second half from the end).

    qwen-vl-utils rounds a float32 torch.linspace; emulating it keeps exact .5 ties identical without
    importing torch in decode workers. tests/video checks it against torch on a grid.
    """
    start, end = np.float32(first), np.float32(last)
    if n == 1:
        return np.array([start], dtype=np.float32)
    step = np.float32((end - start) / np.float32(n - 1))
    idx = np.arange(n)
    half = n // 2
    out = np.empty(n, dtype=np.float32)
    out[:half] = start + step * idx[:half].astype(np.float32)
    out[half:] = end - step * (n - idx[half:] - 1).astype(np.float32)
    return out


# --- pixel budget ------------------------------------------------------------------------------


def _model_seq_len() -> int:
    return int(float(os.environ.get("MODEL_SEQ_LEN", DEFAULT_MODEL_SEQ_LEN)))


def _budget_0_0_14(n_frames, factor, min_pixels, max_pixels, total_pixels):
    min_px = VIDEO_MIN_TOKENS * factor**2 if min_pixels is None else min_pixels
    total = _model_seq_len() * factor**2 * 0.9 if total_pixels is None else total_pixels
    cap = max(min(VIDEO_MAX_TOKENS * factor**2, total / n_frames * FRAME_FACTOR), int(min_px * 1.05))
    # A larger given max_pixels is silently capped (qwen-vl-utils only warns).
    max_px = cap if max_pixels is None else min(max_pixels, cap)
    return min_px, max_px


# 0.0.8 constants are fixed at factor 28 (IMAGE_FACTOR), whatever factor the caller resizes to.
_V8_MIN, _V8_MAX, _V8_TOTAL = 128 * 28 * 28, 768 * 28 * 28, 24576 * 28 * 28


def _budget_0_0_8(n_frames, factor, min_pixels, max_pixels, total_pixels):
    min_px = _V8_MIN if min_pixels is None else min_pixels
    total = _V8_TOTAL if total_pixels is None else total_pixels
    cap = max(min(_V8_MAX, total / n_frames * FRAME_FACTOR), int(min_px * 1.05))
    # In 0.0.8 a given max_pixels replaces the cap entirely.
    return min_px, cap if max_pixels is None else max_pixels


_BUDGETS = {"0.0.14": _budget_0_0_14, "0.0.8": _budget_0_0_8}


def video_pixel_budget(
    n_frames: int,
    *,
    factor: int,
    min_pixels: int | None = None,
    max_pixels: int | None = None,
    total_pixels: int | None = None,
    rules: str = "0.0.14",
) -> tuple[int, float]:
    """Per-frame (min_pixels, max_pixels) for a clip of `n_frames` sampled frames.

    The per-frame cap comes from the total budget shared by all frames (total/T·2, since two frames
    make one temporal patch). max_pixels may be a float, as in the reference; smart_resize accepts it.
    """
    if n_frames <= 0:
        raise ValueError(f"n_frames must be positive, got {n_frames}")
    return _rule(rules, _BUDGETS)(n_frames, factor, min_pixels, max_pixels, total_pixels)
