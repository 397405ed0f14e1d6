"""Pixels for the synthetic QA set: draw flat shapes on a plain background, write MP4 (PyAV) and PNG (PIL).

Shapes are large flat patches of saturated colour so that a question stays decidable from the
decoded pixels after lossy H.264 + 4:2:0 chroma subsampling.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import av
import numpy as np
from PIL import Image

BACKGROUND = (32, 32, 32)

#: Colour names used in questions and their RGB values, far apart in hue so 4:2:0 keeps them apart.
PALETTE: dict[str, tuple[int, int, int]] = {
    "red": (220, 30, 30),
    "green": (30, 190, 60),
    "blue": (40, 70, 230),
    "yellow": (235, 215, 30),
    "magenta": (210, 40, 210),
    "cyan": (30, 200, 210),
}

SHAPES = ("square", "circle")


@dataclass(frozen=True)
class Canvas:
    """Geometry shared by every kind: frame size, frame rate and clip length."""

    width: int
    height: int
    fps: int
    frames: int

    @property
    def radius(self) -> float:
        return max(3.0, min(self.width, self.height) / 8)


@dataclass
class Item:
    """One generated question: its medium (T×H×W×3 clip or H×W×3 image) and the schema fields."""

    kind: str
    medium: np.ndarray
    problem: str
    answer: str
    problem_type: str
    options: list[str] = field(default_factory=list)
    # Every answer the question admits (for a format warm-up that must not reveal the right one),
    # and a correct reasoning-and-answer response (for mixed offline-online training); optional.
    answer_space: list[str] = field(default_factory=list)
    trajectory: str = ""

    @property
    def data_type(self) -> str:
        return "video" if self.medium.ndim == 4 else "image"


def canvas(height: int, width: int, frames: int | None = None) -> np.ndarray:
    """A background image (H×W×3) or clip (T×H×W×3) of uint8 RGB."""
    shape = (height, width, 3) if frames is None else (frames, height, width, 3)
    out = np.empty(shape, dtype=np.uint8)
    out[...] = BACKGROUND
    return out


def shape_mask(height: int, width: int, shape: str, cx: float, cy: float, radius: float) -> np.ndarray:
    """Boolean H×W mask of a filled `square` (half-side = radius) or `circle` centred at (cx, cy)."""
    ys, xs = np.ogrid[:height, :width]
    if shape == "square":
        return (np.abs(xs + 0.5 - cx) <= radius) & (np.abs(ys + 0.5 - cy) <= radius)
    if shape == "circle":
        return (xs + 0.5 - cx) ** 2 + (ys + 0.5 - cy) ** 2 <= radius**2
    raise ValueError(f"unknown shape {shape!r}; use 'square' or 'circle'")


def draw(image: np.ndarray, shape: str, cx: float, cy: float, radius: float, colour: str) -> None:
    """Paint a shape in place onto an H×W×3 image."""
    image[shape_mask(image.shape[0], image.shape[1], shape, cx, cy, radius)] = PALETTE[colour]


def write_mp4(path: Path, frames: np.ndarray, fps: int, gop: int = 8) -> None:
    """Encode T×H×W×3 RGB frames as H.264 yuv420p with a short GOP (cheap frame-accurate seeks).

    One encoder thread: the clips are tiny, and it keeps the output byte-stable across machines.
    No macroblock tree: with it, x264's float lookahead made about 1 encode in 20 of the same clip in
    one process come out different (and decode to other pixels); without it, 0 in 700.
    """
    _, height, width, _ = frames.shape
    if height % 2 or width % 2:
        raise ValueError(f"yuv420p needs even frame sizes, got {width}x{height}")
    with av.open(str(path), mode="w", format="mp4") as container:
        options = {"crf": "18", "preset": "veryfast", "threads": "1", "x264-params": "mbtree=0"}
        stream = container.add_stream("libx264", rate=fps, options=options)
        stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
        stream.codec_context.gop_size = gop
        for frame in frames:
            container.mux(stream.encode(av.VideoFrame.from_ndarray(frame, format="rgb24")))
        container.mux(stream.encode(None))


def write_png(path: Path, image: np.ndarray) -> None:
    Image.fromarray(image).save(path, format="PNG")


def sweep(geo: Canvas, rng: np.random.Generator, shape: str, colour: str, left_to_right: bool,
          radius: float | None = None) -> np.ndarray:
    """A shape crossing the frame horizontally at a random height, visible in every frame."""
    r = radius or geo.radius
    cy = float(rng.uniform(r + 1, geo.height - r - 1))
    xs = np.linspace(r + 1, geo.width - r - 1, geo.frames)
    clip = canvas(geo.height, geo.width, geo.frames)
    for t, cx in enumerate(xs if left_to_right else xs[::-1]):
        draw(clip[t], shape, float(cx), cy, r, colour)
    return clip
