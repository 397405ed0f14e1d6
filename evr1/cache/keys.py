"""Content-addressed keys for the frame cache.

A key is a hash of the media bytes (not the path), the FrameParams fields that decide the pixels of
that media kind, the kind and the rules version. Changing any of them yields a different key, so a
stale entry can never be returned; two paths to the same bytes share one key and are decoded once.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import threading

from evr1.video.clip import FrameParams
from evr1.video.sampling import RULES_VERSION

_CHUNK = 1 << 20
_memo: dict[tuple[str, int, int], str] = {}
_memo_lock = threading.Lock()


def content_hash(path: str | os.PathLike) -> str:
    """sha256 hex digest of the file's bytes, streamed; memoised per (real path, size, mtime) in-process."""
    real = os.path.realpath(os.fspath(path))
    st = os.stat(real)
    memo_key = (real, st.st_size, st.st_mtime_ns)
    with _memo_lock:
        hit = _memo.get(memo_key)
    if hit is not None:
        return hit
    digest = hashlib.sha256()
    with open(real, "rb") as f:
        while chunk := f.read(_CHUNK):
            digest.update(chunk)
    value = digest.hexdigest()
    with _memo_lock:
        _memo[memo_key] = value
    return value


# The FrameParams fields that decide each kind's pixels: an image's key ignores the video budget and
# frame sampling (so changing them does not re-decode images), a video's ignores the image bounds.
KEY_FIELDS: dict[str, tuple[str, ...]] = {
    "video": tuple(f.name for f in dataclasses.fields(FrameParams) if not f.name.startswith("image_")),
    "image": ("factor", "image_min_pixels", "image_max_pixels"),
}


def params_json(params: FrameParams, kind: str = "video") -> str:
    """Canonical JSON (sorted keys) of the FrameParams fields that matter for `kind`: stored with each
    row and hashed into its key."""
    if kind not in KEY_FIELDS:
        raise ValueError(f"kind must be one of {sorted(KEY_FIELDS)}, got {kind!r}")
    values = dataclasses.asdict(params)
    return json.dumps({name: values[name] for name in KEY_FIELDS[kind]}, sort_keys=True, separators=(",", ":"))


def frame_key(content_hash: str, params: FrameParams, kind: str = "video") -> str:
    """Cache key: sha256 over content hash, kind, the kind's FrameParams fields and RULES_VERSION."""
    payload = json.dumps(
        {"content": content_hash, "kind": kind, "params": json.loads(params_json(params, kind)),
         "rules": RULES_VERSION},
        sort_keys=True,
        separators=(",", ":"),
    )
    return hashlib.sha256(payload.encode()).hexdigest()
