"""Timing checks before and after decoding: which frame rate to trust, when timestamps must be rebuilt,
and when a file's timing is too broken to use.

Containers lie in a few known ways (issue 16's corpus): an MP4 whose sample durations are all zero
gives every frame pts 0 and an average rate computed from nothing; a raw H.264 stream has no
timestamps at all and FFmpeg's demuxer assumes 25 fps, while the stream's own SPS says 8; a broken
track header (timescale 0) makes the demuxer read 1 of 16 frames. The rules, after FFmpeg:

- timestamps unique in the packets: the container is right (its average rate, its pts); a bitstream
  rate that disagrees is only noted;
- timestamps missing (a raw stream) or repeated (zero durations): frames are numbered in decode
  output order and timed i / rate, the rate taken from the bitstream (SPS timing), else from the header's
  frame count over its duration; with neither the file is rejected;
- presentation timestamps that go backwards after decoding, or a header that lists more frames than
  the demuxer finds while its time base is degenerate, are rejected with the reason;
- an MP4/MOV video track whose media header (mdhd) says timescale 0 is rejected naming that field:
  FFmpeg then times the track in whole seconds, and the file would otherwise be reported by its
  symptom (one frame in 2,048 s: "too few frames").
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from fractions import Fraction

import av

from evr1.video.errors import VideoDecodeError

_RATE_TOLERANCE = 0.01  # relative: 29.97 vs 30000/1001 agree, 25 vs 8 do not


@dataclass(frozen=True)
class Timing:
    """The frame rate to use and whether the container's timestamps are usable (else i / fps)."""

    fps: float
    rebuilt: bool = False
    note: str = ""


def _rate(value) -> float:
    try:
        return float(Fraction(value)) if value else 0.0
    except (TypeError, ValueError, ZeroDivisionError):
        return 0.0


def bitstream_rate(stream) -> float:
    """The frame rate the codec bitstream declares (H.264/HEVC VUI timing), 0 when it declares none."""
    return _rate(getattr(stream.codec_context, "framerate", None))


def container_rate(stream, total_frames: int, duration: float) -> float:
    """The stream's average frame rate (what decord and torchcodec report), else frames / duration."""
    for rate in (stream.average_rate, stream.guessed_rate, stream.base_rate):
        if _rate(rate) > 0:
            return _rate(rate)
    return total_frames / duration if duration > 0 else 0.0


def invents_timestamps(container) -> bool:
    """A raw-stream format (H.264, MJPEG ...) whose demuxer makes timestamps up at an assumed rate."""
    return bool(container.format.flags & av.format.Flags.no_timestamps.value)


_CONTAINERS = (b"moov", b"trak", b"mdia")  # boxes on the way to a track's mdhd and hdlr
_MAX_MOOV_BYTES = 256 << 20


def _boxes(data: bytes, start: int = 0, end: int | None = None):
    """(type, payload start, payload end) of the ISO-BMFF boxes in data[start:end]."""
    end = len(data) if end is None else end
    at = start
    while at + 8 <= end:
        size, kind = struct.unpack_from(">I4s", data, at)
        header = 8
        if size == 1 and at + 16 <= end:
            size, header = struct.unpack_from(">Q", data, at + 8)[0], 16
        elif size == 0:
            size = end - at
        if size < header or at + size > end:
            return
        yield kind, at + header, at + size
        at += size


def _moov(path: str) -> bytes | None:
    """The `moov` box of an MP4/MOV file (its payload), read by walking the top-level boxes."""
    with open(path, "rb") as f:
        while True:
            head = f.read(8)
            if len(head) < 8:
                return None
            size, kind = struct.unpack(">I4s", head)
            header = 8
            if size == 1:
                size, header = struct.unpack(">Q", f.read(8))[0], 16
            if kind == b"moov":
                length = (size - header) if size else _MAX_MOOV_BYTES
                return f.read(min(length, _MAX_MOOV_BYTES))
            if size == 0 or size < header:
                return None
            f.seek(size - header, 1)


def mp4_video_timescales(path: str) -> list[int]:
    """The mdhd timescale of each video track ('vide' handler) of an MP4/MOV file; [] when unreadable."""
    try:
        moov = _moov(path)
    except (OSError, struct.error):
        return []
    if not moov:
        return []
    scales = []
    for kind, start, end in _boxes(moov):
        if kind != b"trak":
            continue
        for mdia, m_start, m_end in _boxes(moov, start, end):
            if mdia != b"mdia":
                continue
            handler, scale = None, None
            for box, b_start, b_end in _boxes(moov, m_start, m_end):
                if box == b"hdlr" and b_end - b_start >= 12:
                    handler = moov[b_start + 8:b_start + 12]
                elif box == b"mdhd" and b_end - b_start >= 4:
                    offset = b_start + 4 + (16 if moov[b_start] == 1 else 8)  # version 1: 64-bit times
                    if offset + 4 <= b_end:
                        scale = struct.unpack_from(">I", moov, offset)[0]
            if handler == b"vide" and scale is not None:
                scales.append(scale)
    return scales


def check_track_header(path: str, stream) -> None:
    """Reject an MP4/MOV whose video track's media header (mdhd) has timescale 0, naming it.

    Only looked at when FFmpeg reports a time base of a second or more per tick (its fallback for
    timescale 0), so a well-formed file is never read twice."""
    if float(stream.time_base or 0) < 1:
        return
    names = str(getattr(stream.container.format, "name", "") or "")
    if not any(n in names.split(",") for n in ("mov", "mp4")):
        return
    if 0 in mp4_video_timescales(path):
        raise VideoDecodeError(
            path, "broken track timing: the video track's media header (mdhd) has timescale 0, so its frames "
                  "have no usable timestamps (the header must be repaired or the video re-encoded)",
            kind="bad_timestamps")


def stream_timing(path: str, stream, packet_pts: list[int | None], header_frames: int, duration: float
                  ) -> Timing:
    """Decide the rate and whether timestamps must be rebuilt, from demuxed packet pts (decode order)."""
    check_track_header(path, stream)
    if invents_timestamps(stream.container):
        packet_pts = [None] * len(packet_pts)
    total = header_frames or len(packet_pts)
    if header_frames and len(packet_pts) < header_frames and float(stream.time_base or 0) >= 1:
        raise VideoDecodeError(
            path, f"broken track timing (time base {stream.time_base}): the header lists {header_frames} frames "
                  f"but only {len(packet_pts)} can be read", kind="bad_timestamps")
    missing = any(p is None for p in packet_pts)
    repeated = not missing and len(set(packet_pts)) < len(packet_pts)
    declared = bitstream_rate(stream)
    if not (missing or repeated):
        fps = container_rate(stream, total, duration)
        disagree = declared > 0 and fps > 0 and abs(declared - fps) > _RATE_TOLERANCE * fps
        note = f"the bitstream declares {declared:g} fps, the container's timestamps {fps:g} fps (kept)" if disagree else ""
        return Timing(fps, note=note)
    what = "no timestamps (a raw stream)" if missing else "repeated timestamps (zero sample durations)"
    if declared > 0:
        fps, source = declared, "the bitstream's rate"
    elif repeated and header_frames and duration > 0:
        fps, source = header_frames / duration, "the header's frames / duration"
    else:
        raise VideoDecodeError(path, f"{what} and no frame rate in the bitstream to time the frames",
                               kind="bad_timestamps")
    return Timing(fps, rebuilt=True, note=f"{what}: frames timed at {fps:g} fps from {source}")


def check_monotonic(path: str, pts_seconds: list[float | None]) -> None:
    """Raise when decoded presentation timestamps are missing or do not strictly increase."""
    for i in range(1, len(pts_seconds)):
        before, now = pts_seconds[i - 1], pts_seconds[i]
        if before is None or now is None:
            raise VideoDecodeError(path, f"frame {i if now is None else i - 1} has no timestamp",
                                   kind="bad_timestamps")
        if now <= before:
            raise VideoDecodeError(
                path, f"timestamps go backwards: frame {i} at {now:.3f} s after frame {i - 1} at {before:.3f} s",
                kind="bad_timestamps")
