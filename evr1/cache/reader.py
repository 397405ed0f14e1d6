"""Frames for the trainer and eval: from the cache when present, decoded with the same rules when not."""

from __future__ import annotations

import os

import numpy as np

from evr1.cache.keys import content_hash, frame_key, hash_index_for
from evr1.cache.paths import resolve_media_path
from evr1.cache.store import frame_store
from evr1.video.clip import FrameParams, VideoClip
from evr1.video.decode import decode_video, load_image
from evr1.video.errors import MediaDecodeError

MODES = ("prefer-cache", "cache-only", "decode-only")


class CacheMiss(LookupError):
    """cache-only mode found no `frames` row for this media and these parameters."""

    def __init__(self, path: str, key: str, frames_uri: str) -> None:
        self.path, self.key, self.frames_uri = path, key, frames_uri
        super().__init__(
            f"no cached frames for {path!r} (key {key[:16]}…) in {frames_uri}; "
            "build the cache with these parameters or use mode='prefer-cache'"
        )


def regular_media_path(path: str | os.PathLike, data_root: str | os.PathLike | None = None) -> str:
    """The resolved path of a media file, refused at once (MediaDecodeError, with the reasons the
    cache builder and ingestion give) when it does not exist or is not a regular file: opening a FIFO
    would block until its reader's timeout."""
    real = resolve_media_path(path, data_root)
    if not os.path.exists(real):
        raise MediaDecodeError(os.fspath(path), f"file does not exist ({real})", kind="missing")
    if not os.path.isfile(real):
        raise MediaDecodeError(os.fspath(path), f"not a regular file ({real})", kind="not_a_file")
    return real


class FrameReader:
    """Read sampled frames by media path.

    - prefer-cache: a cache hit, else decode on the fly (byte-identical to what the builder stores);
    - cache-only: a hit, else `CacheMiss`;
    - decode-only: always decode, never open the cache.
    A hit is checked against `params` (stored parameters and rules version must match).
    """

    def __init__(
        self,
        frames_uri: str | None,
        params: FrameParams,
        *,
        mode: str = "prefer-cache",
        data_root: str | os.PathLike | None = None,
    ) -> None:
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
        if mode != "decode-only" and not frames_uri:
            raise ValueError(f"mode {mode!r} needs a frames_uri")
        self.frames_uri, self.params, self.mode, self.data_root = frames_uri, params, mode, data_root
        self.hits = 0
        self.misses = 0

    def _cached(self, path: str, kind: str) -> VideoClip | None:
        if self.mode == "decode-only":
            return None
        key = frame_key(content_hash(path, index=hash_index_for(self.frames_uri)), self.params, kind)
        clip = frame_store(self.frames_uri).read(key, params=self.params)
        if clip is None:
            self.misses += 1
            if self.mode == "cache-only":
                raise CacheMiss(path, key, self.frames_uri)
        else:
            self.hits += 1
        return clip

    def video(self, path: str | os.PathLike, *, start: float | None = None, end: float | None = None) -> VideoClip:
        """The sampled, resized clip for a video file, or for its [start, end] seconds.

        A segment (MVBench's official protocol) is always decoded with the same rules: the cache holds
        whole-video samples, keyed by content and parameters, and a segment's frames are not among them.
        """
        real = regular_media_path(path, self.data_root)
        if start is not None or end is not None:
            return decode_video(real, self.params, start=start, end=end)
        clip = self._cached(real, "video")
        return clip if clip is not None else decode_video(real, self.params)

    def image(self, path: str | os.PathLike) -> np.ndarray:
        """The resized uint8 H×W×3 image."""
        real = regular_media_path(path, self.data_root)
        clip = self._cached(real, "image")
        return clip.frames[0] if clip is not None else load_image(real, self.params)
