"""Tiny real media files for tests, encoded with PyAV (H.264 / AAC) and PIL.

Each video frame encodes its own index: a coloured square moves one step per frame and the
background grey level is 8·index (mod 256), so a test can read back which native frame it got.
"""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import av
import numpy as np
from PIL import Image


def frame_pattern(index: int, height: int, width: int) -> np.ndarray:
    """The RGB frame written at native index `index`."""
    img = np.full((height, width, 3), (index * 8) % 256, dtype=np.uint8)
    x = (index * 3) % max(1, width - 12)
    img[8:20, x : x + 12] = (255, 40, 40)
    return img


def write_video(
    path: Path,
    *,
    n_frames: int = 16,
    fps: int = 8,
    height: int = 48,
    width: int = 64,
    gop: int | None = 4,
    pts: list[int] | None = None,
    codec: str = "libx264",
    bframes: int = 0,
) -> Path:
    """Encode an MP4. `pts` (in 1/fps/… units of time_base 1/(fps*10)) makes a variable-frame-rate file;
    `gop=None` keeps x264's default keyframe interval (250)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with av.open(str(path), mode="w") as out:
        stream = out.add_stream(codec, rate=fps)
        stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
        if gop is not None:
            stream.codec_context.gop_size = gop
        # Near-lossless so a test can read the grey level back; no B-frames keeps pts simple for VFR.
        stream.options = {"crf": "1", "bf": str(bframes), "x264-params": "scenecut=0"} if codec == "libx264" else {}
        if pts is not None:
            stream.codec_context.time_base = Fraction(1, fps * 10)
        for i in range(n_frames):
            frame = av.VideoFrame.from_ndarray(frame_pattern(i, height, width), format="rgb24")
            if pts is not None:
                frame.pts, frame.time_base = pts[i], Fraction(1, fps * 10)
            for packet in stream.encode(frame):
                out.mux(packet)
        for packet in stream.encode():
            out.mux(packet)
    return path


def write_audio_only(path: Path, seconds: float = 1.0, rate: int = 16000) -> Path:
    """An .mp4 with one AAC audio stream and no video stream."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with av.open(str(path), mode="w") as out:
        stream = out.add_stream("aac", rate=rate)
        samples = int(seconds * rate)
        tone = (0.2 * np.sin(np.arange(samples) * 2 * np.pi * 440 / rate)).astype(np.float32)
        chunk = 1024
        for i in range(0, samples, chunk):
            frame = av.AudioFrame.from_ndarray(tone[None, i : i + chunk], format="fltp", layout="mono")
            frame.sample_rate, frame.pts = rate, i
            for packet in stream.encode(frame):
                out.mux(packet)
        for packet in stream.encode():
            out.mux(packet)
    return path


def write_truncated(src: Path, dst: Path, keep: float = 0.5) -> Path:
    data = src.read_bytes()
    dst.write_bytes(data[: int(len(data) * keep)])
    return dst


def write_image(path: Path, height: int = 50, width: int = 70, mode: str = "RGB") -> Path:
    rng = np.random.default_rng(0)
    channels = 4 if mode == "RGBA" else 3
    Image.fromarray(rng.integers(0, 256, (height, width, channels), dtype=np.uint8), mode).save(path)
    return path


_MKV_CLUSTER = b"\x1f\x43\xb6\x75"  # Matroska Cluster element id: the frames start here
_MKV_AVC_CODEC_ID = b"V_MPEG4/ISO/AVC"


def write_unknown_codec(mkv: Path, dst: Path) -> Path:
    """A Matroska file whose video track names a codec FFmpeg has no decoder for."""
    data = mkv.read_bytes()
    assert _MKV_AVC_CODEC_ID in data
    dst.write_bytes(data.replace(_MKV_AVC_CODEC_ID, b"V_EVR1/UNKNOWN!"))
    return dst


def write_zero_frames(mkv: Path, dst: Path) -> Path:
    """A Matroska file with a video track header and an empty first cluster: zero frames."""
    data = mkv.read_bytes()
    dst.write_bytes(data[: data.index(_MKV_CLUSTER) + 4])
    return dst


def write_faststart_truncated(dst: Path, n_frames: int = 32) -> Path:
    """An MP4 with its index first (faststart), cut in half: it opens, but half the frames are gone."""
    full = dst.with_suffix(".full.mp4")
    with av.open(str(full), mode="w", options={"movflags": "+faststart"}) as out:
        stream = out.add_stream("libx264", rate=8)
        stream.width, stream.height, stream.pix_fmt = 64, 48, "yuv420p"
        stream.codec_context.gop_size = 4
        for i in range(n_frames):
            for packet in stream.encode(av.VideoFrame.from_ndarray(frame_pattern(i, 48, 64), format="rgb24")):
                out.mux(packet)
        for packet in stream.encode():
            out.mux(packet)
    return write_truncated(full, dst)
