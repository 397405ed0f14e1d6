"""Content-addressed keys for the frame cache.

A key is a hash of the media bytes (not the path), every FrameParams field, the media kind and the
rules version. Changing any of them yields a different key, so a stale entry can never be returned;
two paths to the same bytes share one key and are decoded once.
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


def params_json(params: FrameParams) -> str:
    """Canonical JSON of every FrameParams field (sorted keys): stored with each row and hashed into keys."""
    return json.dumps(dataclasses.asdict(params), sort_keys=True, separators=(",", ":"))


def frame_key(content_hash: str, params: FrameParams, kind: str = "video") -> str:
    """Cache key: sha256 over content hash, kind, all FrameParams fields and RULES_VERSION."""
    if kind not in ("video", "image"):
        raise ValueError(f"kind must be 'video' or 'image', got {kind!r}")
    payload = json.dumps(
        {"content": content_hash, "kind": kind, "params": json.loads(params_json(params)), "rules": RULES_VERSION},
        sort_keys=True,
        separators=(",", ":"),
    )
    return hashlib.sha256(payload.encode()).hexdigest()
