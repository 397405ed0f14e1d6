"""Video metadata without decoding pixels: frame count, native fps, duration, size, codec."""

from __future__ import annotations

import os
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass

import av

from evr1.video.errors import VideoDecodeError
from evr1.video.timing import stream_timing


@dataclass(frozen=True)
class VideoInfo:
    """What sampling needs to know before decoding. `total_frames` counts frames, not header claims."""

    path: str
    total_frames: int
    fps: float
    duration: float
    height: int
    width: int
    codec: str


def check_file(path: str, error: type = VideoDecodeError) -> None:
    """Fail early, with a precise reason, for a path that is not a readable non-empty file."""
    if not os.path.exists(path):
        raise error(path, "file does not exist", kind="missing")
    if not os.path.isfile(path):
        raise error(path, "not a regular file", kind="not_a_file")
    if os.path.getsize(path) == 0:
        raise error(path, "file is empty (0 bytes)", kind="empty")


# Leading bytes of the containers we meet; a file with none of them that FFmpeg cannot open is not media.
_SIGNATURES: dict[str, Callable[[bytes], bool]] = {
    "MP4/MOV": lambda b: b[4:8] in (b"ftyp", b"moov", b"mdat", b"free", b"wide", b"skip", b"pnot"),
    "Matroska/WebM": lambda b: b.startswith(b"\x1a\x45\xdf\xa3"),
    "AVI": lambda b: b.startswith(b"RIFF") and b[8:12] == b"AVI ",
    "MPEG-TS": lambda b: len(b) > 188 and b[0] == 0x47 and b[188] == 0x47,
    "MPEG-PS": lambda b: b.startswith(b"\x00\x00\x01\xba"),
    "FLV": lambda b: b.startswith(b"FLV"),
    "Ogg": lambda b: b.startswith(b"OggS"),
    "ASF/WMV": lambda b: b.startswith(b"\x30\x26\xb2\x75"),
    "GIF": lambda b: b.startswith((b"GIF87a", b"GIF89a")),
}


def sniff_container(path: str) -> str | None:
    """The container named by the file's first bytes, or None when they match no known video format."""
    with open(path, "rb") as f:
        head = f.read(256)
    return next((name for name, match in _SIGNATURES.items() if match(head)), None)


def _open_error(path: str, exc: Exception) -> VideoDecodeError:
    """A clear reason for a file FFmpeg cannot open: not media at all, or a damaged container."""
    container = sniff_container(path)
    if container is None:
        with open(path, "rb") as f:
            head = f.read(16)
        return VideoDecodeError(path, f"not a video file: no known container signature (starts with {head!r})",
                                kind="not_media")
    return VideoDecodeError(path, f"truncated or corrupt {container} file ({exc})", kind="corrupt")


@contextmanager
def open_video(path: str):
    """Open a container and yield (container, video_stream); translate FFmpeg errors to VideoDecodeError."""
    check_file(path)
    try:
        container = av.open(path, mode="r")
    except av.FFmpegError as exc:
        raise _open_error(path, exc) from exc
    try:
        if not container.streams.video:
            kinds = sorted({s.type for s in container.streams}) or ["none"]
            raise VideoDecodeError(path, f"no video stream (streams: {', '.join(kinds)})", kind="no_video_stream")
        stream = container.streams.video[0]
        if stream.codec_context is None or stream.codec_context.codec is None:
            raise VideoDecodeError(path, "unsupported codec (no decoder)", kind="unsupported_codec")
        yield container, stream
    finally:
        container.close()


def probe_video(path: str | os.PathLike) -> VideoInfo:
    """Read the container header and the packets' timestamps (no decoding), with the same timing rules
    as decoding (evr1.video.timing): a raw stream's rate comes from its bitstream, not FFmpeg's 25."""
    path = os.fspath(path)
    with open_video(path) as (container, stream):
        header_duration = float(stream.duration * stream.time_base) if stream.duration and stream.time_base else 0.0
        if not header_duration and container.duration:
            header_duration = container.duration / av.time_base
        try:
            packet_pts = [packet.pts for packet in container.demux(stream) if packet.size > 0]
        except av.FFmpegError as exc:
            raise VideoDecodeError(path, f"corrupt stream while counting frames ({exc})", kind="corrupt") from exc
        header_frames = int(stream.frames or 0)
        timing = stream_timing(path, stream, packet_pts, header_frames, header_duration)
        total = header_frames or len(packet_pts)
        fps = timing.fps
        duration = total / fps if fps and (timing.rebuilt or not header_duration) else header_duration
        ctx = stream.codec_context
        return VideoInfo(path, int(total), fps, duration, ctx.height, ctx.width, ctx.codec.name)
