"""PyAV decoding into sampled, resized uint8 frames with the qwen-vl-utils rules.

Frame i is the i-th frame in presentation order (see evr1.video.index), so indices stay right for
variable-frame-rate files. Two strategies give the same frames: decode everything and keep the sampled
ones (RGB conversion only for those), or seek to the keyframe before each sampled frame and decode
forward. `strategy="auto"` picks seeking only when it decodes clearly fewer frames (short GOPs); any
surprise while seeking (a frame that is not where the index says) falls back to decoding everything.
Timing is checked on the way (evr1.video.timing): broken timestamps are rebuilt or rejected, and a
display rotation in the container is applied to the frames, as FFmpeg's player and CLI do.
"""

from __future__ import annotations

import io
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass

import av
import numpy as np
from PIL import Image

from evr1.video.clip import FrameParams, VideoClip
from evr1.video.errors import ImageDecodeError, VideoDecodeError
from evr1.video.index import FrameIndex, build_index, plan_strategy
from evr1.video.probe import check_file, open_video
from evr1.video.resize import resize_video_frames
from evr1.video.sampling import (
    frame_range,
    image_size,
    sample_frame_indices,
    smart_nframes,
    smart_resize,
    video_pixel_budget,
)
from evr1.video.timing import Timing, check_monotonic, stream_timing

__all__ = ["VideoDecodeError", "ImageDecodeError", "decode_video", "load_image", "plan_frames", "STRATEGIES"]

STRATEGIES = ("auto", "all", "seek")


def plan_frames(
    total_frames: int, fps: float, params: FrameParams, *, start: float | None = None, end: float | None = None
) -> list[int]:
    """Native indices to keep, by smart_nframes over the [start, end] range then linspace.

    Like qwen-vl-utils, the frame count is computed on the frames inside the range.
    """
    first, last = frame_range(total_frames, fps, start=start, end=end)
    in_range = last - first + 1
    n = smart_nframes(
        in_range,
        fps,
        fps=None if params.nframes is not None else params.fps,
        nframes=params.nframes,
        min_frames=params.min_frames,
        max_frames=params.max_frames,
        rules=params.rules,
    )
    return sample_frame_indices(total_frames, n, video_fps=fps, start=start, end=end)


@dataclass(frozen=True)
class _Layout:
    """What the container says before any pixel is decoded."""

    total_frames: int  # frames by packet count (header count when packets cannot be indexed)
    fps: float
    duration: float
    time_base: float
    index: FrameIndex | None
    header_frames: int
    timing: Timing

    @property
    def seekable(self) -> bool:
        """Seek only where the packet index and the header agree on the frame count (e.g. MP4)."""
        return self.index is not None and self.index.total_frames == self.header_frames


class _SeekMiss(Exception):
    """Seeking did not land where the index said; decode everything instead."""


def _configure_threads(stream, threads: int | None) -> None:
    """None: FFmpeg's default (slice threads). 1: one thread (one per Ray worker). n>1 or 0: frame+slice."""
    if threads is None:
        return
    ctx = stream.codec_context
    if threads == 1:
        ctx.thread_type, ctx.thread_count = "SLICE", 1
    else:
        ctx.thread_type, ctx.thread_count = "AUTO", threads


def _layout(path: str) -> _Layout:
    """Frame count, native fps, duration and the packet index, by demuxing only."""
    with open_video(path) as (container, stream):
        header_frames = int(stream.frames or 0)
        time_base = float(stream.time_base) if stream.time_base else 0.0
        duration = float(stream.duration * stream.time_base) if stream.duration and stream.time_base else 0.0
        if not duration and container.duration:
            duration = container.duration / av.time_base
        try:
            packets = [(p.pts, p.is_keyframe, p.is_discard) for p in container.demux(stream) if p.size > 0]
        except av.FFmpegError as exc:
            raise VideoDecodeError(path, f"corrupt stream while reading packets ({exc})", kind="corrupt") from exc
        timing = stream_timing(path, stream, [pts for pts, _, _ in packets], header_frames, duration)
        if header_frames and len(packets) < header_frames:
            raise VideoDecodeError(
                path, f"truncated: the header lists {header_frames} frames but the file holds {len(packets)}",
                kind="corrupt",
            )
        index = build_index(packets)
        total = index.total_frames if index is not None else (header_frames or len(packets))
        fps = timing.fps
        if timing.rebuilt or not duration:
            duration = total / fps if fps else 0.0
        return _Layout(total, fps, duration, time_base, index, header_frames, timing)


def _decoded_frames(path: str, threads: int | None, deadline: float | None, seek_pts: int | None = None
                    ) -> Iterator[av.VideoFrame]:
    """Frames in presentation order (from the keyframe at or before `seek_pts` when given)."""
    count = 0
    with open_video(path) as (container, stream):
        _configure_threads(stream, threads)
        try:
            if seek_pts is not None:
                container.seek(seek_pts, stream=stream, backward=True, any_frame=False)
            for count, frame in enumerate(container.decode(stream), start=1):
                if deadline is not None and time.monotonic() > deadline:
                    raise VideoDecodeError(path, f"decoding timed out after {count} frames", kind="timeout")
                yield frame
        except av.error.DecoderNotFoundError as exc:
            raise VideoDecodeError(path, f"unsupported codec ({exc})", kind="unsupported_codec") from exc
        except av.FFmpegError as exc:
            raise VideoDecodeError(path, f"corrupt stream after {count} frames ({exc})", kind="corrupt") from exc


def _rgb(frame: av.VideoFrame) -> np.ndarray:
    """The frame as displayed: RGB, turned by the container's display rotation (a multiple of 90°;
    positive is counter-clockwise, as FFmpeg's display matrix reads)."""
    rgb = frame.to_ndarray(format="rgb24")
    turns = round((frame.rotation or 0) / 90) % 4
    return np.ascontiguousarray(np.rot90(rgb, k=turns)) if turns else rgb


def _decode_all(path: str, wanted: set[int], threads: int | None, deadline: float | None
                ) -> tuple[dict[int, np.ndarray], dict[int, int], int, list[int | None]]:
    """Decode every frame; RGB and pts of the wanted ones, the number of frames decoded and every pts."""
    kept: dict[int, np.ndarray] = {}
    pts: dict[int, int] = {}
    every: list[int | None] = []
    count = 0
    for count, frame in enumerate(_decoded_frames(path, threads, deadline), start=1):
        every.append(frame.pts if frame.pts is not None else frame.dts)  # dts: FFmpeg's fallback for a frame without pts
        if count - 1 in wanted:
            kept[count - 1], pts[count - 1] = _rgb(frame), frame.pts
    return kept, pts, count, every


def _decode_seeking(path: str, wanted: list[int], index: FrameIndex, threads: int | None,
                    deadline: float | None) -> tuple[dict[int, np.ndarray], dict[int, int]]:
    """Seek to the keyframe before each kept frame unless decoding on reaches it sooner.

    Frames are identified by pts through the index; leading frames of an open GOP (before the keyframe
    sought to) are never kept. Raises _SeekMiss when a frame is not where the index puts it.
    """
    position = {p: i for i, p in enumerate(index.pts)}
    kept: dict[int, np.ndarray] = {}
    pts: dict[int, int] = {}
    frames: Iterator[av.VideoFrame] | None = None
    last = -1  # index of the last frame the current pass output
    for target in sorted(set(wanted)):
        if target in kept:
            continue
        key = index.keyframe_before(target)
        if frames is None or key > last + 1:
            if frames is not None:
                frames.close()
            frames, floor = _decoded_frames(path, threads, deadline, seek_pts=index.pts[key]), key
        for frame in frames:
            at = position.get(frame.pts)
            if at is None:
                raise _SeekMiss(f"frame pts {frame.pts} not in the index")
            if at < floor:
                continue  # an open GOP's leading frame, or the decoder catching up: not trustworthy here
            if at > target:
                raise _SeekMiss(f"frame {target} was never output (seeking to frame {key} gave frame {at})")
            last = at
            if at == target:
                kept[at], pts[at] = _rgb(frame), frame.pts
                break
        else:
            raise _SeekMiss(f"stream ended before frame {target}")
    if frames is not None:
        frames.close()
    return kept, pts


def _plan(path: str, total: int, fps: float, params: FrameParams, start, end) -> list[int]:
    if total == 0:
        raise VideoDecodeError(path, "video stream has zero frames", kind="zero_frames")
    if fps <= 0:
        raise VideoDecodeError(path, "cannot determine the frame rate", kind="corrupt")
    try:
        return plan_frames(total, fps, params, start=start, end=end)
    except ValueError as exc:
        raise VideoDecodeError(path, f"{exc} (the video has {total} frames)", kind="too_few_frames") from exc


def decode_video(
    path: str | os.PathLike,
    params: FrameParams,
    *,
    start: float | None = None,
    end: float | None = None,
    timeout: float | None = None,
    threads: int | None = None,
    strategy: str = "auto",
) -> VideoClip:
    """Sample and resize a video file into a VideoClip (uint8 T×H×W×3 plus native fps and indices).

    `threads` sets FFmpeg's decoder threads (None: its default); `strategy` is "auto", "all" (decode
    everything) or "seek". The frames do not depend on either. With a [start, end] range,
    `total_frames` and `duration` describe the range, as qwen-vl-utils' `total_num_frames` does.
    Raises VideoDecodeError (a ValueError) for a missing, empty, non-video, corrupt, too short or
    undecodable file, and when `timeout` seconds pass.
    """
    if strategy not in STRATEGIES:
        raise ValueError(f"strategy must be one of {STRATEGIES}, got {strategy!r}")
    path = os.fspath(path)
    deadline = time.monotonic() + timeout if timeout else None
    layout = _layout(path)
    total, fps = layout.total_frames, layout.fps
    indices = _plan(path, total, fps, params, start, end)
    kept, pts = None, {}
    if layout.seekable and (strategy == "seek" or strategy == "auto" and
                            plan_strategy(layout.index, indices) == "seek"):
        try:
            kept, pts = _decode_seeking(path, indices, layout.index, threads, deadline)
            used = "seek"
        except _SeekMiss:
            kept = None
    if kept is None:
        used = "all"
        kept, pts, decoded, every = _decode_all(path, set(indices), threads, deadline)
        if decoded != total:  # the container miscounted: plan again on what really decodes
            total = decoded
            indices = _plan(path, total, fps, params, start, end)
            kept, pts, decoded, every = _decode_all(path, set(indices), threads, deadline)
            if decoded != total:
                raise VideoDecodeError(path, "frame count changed between two decodes", kind="corrupt")
        if not layout.timing.rebuilt:
            check_monotonic(path, [p * layout.time_base if p is not None else None for p in every])

    n = len(indices)
    min_px, max_px = video_pixel_budget(
        n,
        factor=params.factor,
        min_pixels=params.min_pixels,
        max_pixels=params.max_pixels,
        total_pixels=params.total_pixels,
        rules=params.rules,
    )
    raw = [kept[i] for i in indices]
    height, width = raw[0].shape[:2]
    try:
        h, w = smart_resize(height, width, factor=params.factor, min_pixels=min_px, max_pixels=max_px)
    except ValueError as exc:
        raise VideoDecodeError(path, str(exc), kind="bad_size") from exc
    first, last = frame_range(total, fps, start=start, end=end)
    in_range = last - first + 1
    ranged = start is not None or end is not None
    rebuilt = layout.timing.rebuilt
    timing = {"timing": layout.timing.note} if layout.timing.note else {}
    return VideoClip(
        frames=resize_video_frames(raw, h, w),
        fps=fps,
        frame_indices=indices,
        total_frames=in_range,
        duration=in_range / fps if ranged or rebuilt else layout.duration,
        extra={
            "sample_fps": n / in_range * fps,
            "video_backend": "pyav",
            "video_total_frames": total,
            "pts_seconds": [pts[i] * layout.time_base if pts.get(i) is not None and not rebuilt else i / fps
                            for i in indices],
            "decode_strategy": used,
            **timing,
        },
    )


def _to_rgb(image: Image.Image) -> Image.Image:
    """RGBA over a white background, everything else plain RGB (qwen-vl-utils 0.0.14 to_rgb)."""
    if image.mode == "RGBA":
        background = Image.new("RGB", image.size, (255, 255, 255))
        background.paste(image, mask=image.split()[3])
        return background
    return image.convert("RGB")


def load_image(path_or_bytes: str | os.PathLike | bytes, params: FrameParams) -> np.ndarray:
    """Open an image (path or encoded bytes), convert to RGB and resize with the image pixel bounds.

    Returns uint8 H×W×3 with H and W multiples of `params.factor`.
    """
    if isinstance(path_or_bytes, (bytes, bytearray, memoryview)):
        label, source = "<bytes>", io.BytesIO(bytes(path_or_bytes))
        if not path_or_bytes:
            raise ImageDecodeError(label, "empty byte string", kind="empty")
    else:
        label = source = os.fspath(path_or_bytes)
        check_file(label, ImageDecodeError)
    try:
        with Image.open(source) as image:
            rgb = _to_rgb(image)
    except (OSError, Image.DecompressionBombError) as exc:  # UnidentifiedImageError is an OSError
        raise ImageDecodeError(label, f"not a readable image ({exc})", kind="not_media") from exc
    try:
        h, w = image_size(
            rgb.height, rgb.width, factor=params.factor,
            min_pixels=params.image_min_pixels, max_pixels=params.image_max_pixels,
        )
    except ValueError as exc:
        raise ImageDecodeError(label, str(exc), kind="bad_size") from exc
    if (h, w) != (rgb.height, rgb.width):
        rgb = rgb.resize((w, h), Image.Resampling.BICUBIC)
    return np.asarray(rgb, dtype=np.uint8)
