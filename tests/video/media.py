"""Tiny real media files for tests, encoded with PyAV (H.264 / AAC) and PIL.

Each video frame encodes its own index: a coloured square moves one step per frame and the
background grey level is 8·index (mod 256), so a test can read back which native frame it got.
"""

from __future__ import annotations

import struct
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


# --- a timing corpus: files whose clocks lie (issue 16) ------------------------------------------


def _mp4_box(data: bytes | bytearray, name: bytes) -> int:
    """Offset of a box's type field (the 4 bytes after its size); the test files hold one track."""
    at = data.find(name)
    assert at > 0, f"no {name!r} box"
    return at


def write_zero_durations(src: Path, dst: Path) -> Path:
    """A copy of an MP4 whose sample durations (the stts deltas) are all zero: every frame gets pts 0."""
    data = bytearray(src.read_bytes())
    at = _mp4_box(data, b"stts")
    for k in range(struct.unpack_from(">I", data, at + 8)[0]):
        struct.pack_into(">I", data, at + 16 + 8 * k, 0)
    dst.write_bytes(bytes(data))
    return dst


def write_zero_timescale(src: Path, dst: Path) -> Path:
    """A copy of an MP4 whose media header (mdhd) timescale is 0."""
    data = bytearray(src.read_bytes())
    at = _mp4_box(data, b"mdhd")
    struct.pack_into(">I", data, at + 4 + 4 + (16 if data[at + 4] == 1 else 8), 0)
    dst.write_bytes(bytes(data))
    return dst


def _encode(out, codec: str, fps: int, n_frames: int, height: int, width: int, pix_fmt: str = "yuv420p",
            rotation: int = 0, pts_order: list[int] | None = None) -> None:
    stream = out.add_stream(codec, rate=fps)
    stream.width, stream.height, stream.pix_fmt = width, height, pix_fmt
    stream.options = {"crf": "1", "bf": "0"} if codec == "libx264" else {}
    stream.codec_context.time_base = Fraction(1, fps)
    if rotation:
        stream.set_display_rotation(rotation)
    packets = []
    for i in range(n_frames):
        frame = av.VideoFrame.from_ndarray(frame_pattern(i, height, width), format="rgb24")
        frame.pts, frame.time_base = i, Fraction(1, fps)
        packets += stream.encode(frame)
    packets += stream.encode()
    for k, packet in enumerate(packets):
        if pts_order is not None:  # decode order kept, presentation times permuted (dts <= pts)
            packet.pts, packet.dts, packet.time_base = pts_order[k] + 4, k, Fraction(1, fps)
        out.mux(packet)


def write_raw_stream(path: Path, codec: str = "libx264", fmt: str = "h264", *, fps: int = 8, n_frames: int = 16,
                     height: int = 48, width: int = 64, pix_fmt: str = "yuv420p") -> Path:
    """A raw elementary stream (no container timestamps): FFmpeg's demuxer assumes 25 fps."""
    with av.open(str(path), mode="w", format=fmt) as out:
        _encode(out, codec, fps, n_frames, height, width, pix_fmt)
    return path


def write_rotated(path: Path, rotation: int = 90, *, fps: int = 8, n_frames: int = 16, height: int = 48,
                  width: int = 64) -> Path:
    """An MP4 with a display matrix rotating the picture `rotation` degrees counter-clockwise."""
    with av.open(str(path), mode="w") as out:
        _encode(out, "libx264", fps, n_frames, height, width, rotation=rotation)
    return path


def write_backwards(path: Path, *, fps: int = 8) -> Path:
    """A Matroska file whose presentation times jump back: frames 8-11 are timed after 12-15."""
    order = [0, 1, 2, 3, 4, 5, 6, 7, 12, 13, 14, 15, 8, 9, 10, 11]
    with av.open(str(path), mode="w") as out:
        _encode(out, "libx264", fps, len(order), 48, 64, pts_order=order)
    return path
