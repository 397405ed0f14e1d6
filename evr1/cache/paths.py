"""Resolving media paths under an optional data root, refusing anything that escapes it."""

from __future__ import annotations

import os

from evr1.video.errors import MediaDecodeError


class MediaPathError(MediaDecodeError):
    """A media path that resolves outside the data root, or to nothing."""

    what = "media path"


def resolve_media_path(path: str | os.PathLike, data_root: str | os.PathLike | None = None) -> str:
    """Absolute real path of `path` (relative paths are under `data_root` when given).

    With a `data_root`, the resolved path (symlinks followed) must lie inside it: a dataset row
    cannot make the pipeline read arbitrary files.
    """
    raw = os.fspath(path)
    if not raw:
        raise MediaPathError(raw, "empty path", kind="missing")
    if data_root is None:
        return os.path.realpath(raw)
    root = os.path.realpath(os.fspath(data_root))
    real = os.path.realpath(os.path.join(root, raw))  # join keeps an absolute `raw` as is
    if os.path.commonpath([real, root]) != root:
        raise MediaPathError(raw, f"resolves to {real}, outside the data root {root}", kind="outside_root")
    return real
