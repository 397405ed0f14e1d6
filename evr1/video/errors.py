"""Errors for media that cannot be turned into frames.

Each carries the path, a human reason and a short machine `kind` (missing, empty, not_media,
no_video_stream, corrupt, unsupported_codec, too_few_frames, timeout, ...) so that the cache builder
can write a precise reject row without parsing messages.
"""

from __future__ import annotations


class MediaDecodeError(ValueError):
    """A media file could not be decoded into frames."""

    what = "media"

    def __init__(self, path: str, reason: str, *, kind: str = "error") -> None:
        self.path = str(path)
        self.reason = reason
        self.kind = kind
        super().__init__(f"cannot decode {self.what} {self.path!r}: {reason}")

    def __reduce__(self):
        # Keep the keyword `kind` across pickling (Ray ships exceptions between processes).
        return (_rebuild, (type(self), self.path, self.reason, self.kind))


def _rebuild(cls, path, reason, kind):
    return cls(path, reason, kind=kind)


class VideoDecodeError(MediaDecodeError):
    """A video file is missing, empty, not a video, corrupt, too short or uses an unsupported codec."""

    what = "video"


class ImageDecodeError(MediaDecodeError):
    """An image file or byte string is missing, empty or not a readable image."""

    what = "image"
