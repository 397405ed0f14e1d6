"""Pixels for the synthetic QA set: draw flat shapes on a plain background, write MP4 (PyAV) and PNG (PIL).

Shapes are large flat patches of saturated colour so that a question stays decidable from the
decoded pixels after lossy H.264 + 4:2:0 chroma subsampling.
"""

from __future__ import annotations

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
    """
    _, height, width, _ = frames.shape
    if height % 2 or width % 2:
        raise ValueError(f"yuv420p needs even frame sizes, got {width}x{height}")
    with av.open(str(path), mode="w", format="mp4") as container:
        stream = container.add_stream("libx264", rate=fps, options={"crf": "18", "preset": "veryfast", "threads": "1"})
        stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
        stream.codec_context.gop_size = gop
        for frame in frames:
            container.mux(stream.encode(av.VideoFrame.from_ndarray(frame, format="rgb24")))
        container.mux(stream.encode(None))


def write_png(path: Path, image: np.ndarray) -> None:
    Image.fromarray(image).save(path, format="PNG")
