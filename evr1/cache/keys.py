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
import time

from evr1.video.clip import FrameParams
from evr1.video.sampling import RULES_VERSION

_CHUNK = 1 << 20
_memo: dict[tuple[str, int, int], str] = {}
_memo_lock = threading.Lock()
INDEX_NAME = "media_hashes.jsonl"


class HashTimeout(TimeoutError):
    """Hashing one file took longer than the decode timeout."""


class HashIndex:
    """A persisted (real path, size, mtime_ns) → sha256 map: JSON lines appended under a run folder's
    Lance folder, so cache, train and eval hash each media file once per run folder, not once per
    command. A changed file (size or mtime) is a new entry; a torn last line is ignored."""

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = os.fspath(path)
        self._lock = threading.Lock()
        self._known: dict[tuple[str, int, int], str] = {}
        self._read_bytes = 0
        self._load()

    def _load(self) -> None:
        try:
            with open(self.path, "rb") as f:
                f.seek(self._read_bytes)
                data = f.read()
        except FileNotFoundError:
            return
        complete = data[: data.rfind(b"\n") + 1]
        self._read_bytes += len(complete)
        for line in complete.splitlines():
            try:
                e = json.loads(line)
                self._known[(e["path"], int(e["size"]), int(e["mtime_ns"]))] = str(e["sha256"])
            except (ValueError, KeyError, TypeError):
                continue

    def get(self, key: tuple[str, int, int]) -> str | None:
        with self._lock:
            if key not in self._known:
                self._load()  # another process (a Ray worker, the builder) may have added it
            return self._known.get(key)

    def put(self, key: tuple[str, int, int], digest: str) -> None:
        line = json.dumps({"path": key[0], "size": key[1], "mtime_ns": key[2], "sha256": digest}) + "\n"
        with self._lock:
            self._known[key] = digest
            os.makedirs(os.path.dirname(self.path) or ".", exist_ok=True)
            with open(self.path, "a", encoding="utf-8") as f:  # one short O_APPEND write: lines never interleave
                f.write(line)


_indexes: dict[str, HashIndex] = {}


def hash_index_for(frames_uri: str | None) -> HashIndex | None:
    """The run folder's hash index beside a local frames table (None for object stores or no table)."""
    if not frames_uri:
        return None
    uri = frames_uri.removeprefix("file://")
    if "://" in uri:
        return None
    path = os.path.join(os.path.dirname(os.path.abspath(uri)), INDEX_NAME)
    with _memo_lock:
        index = _indexes.get(path)
        if index is None:
            index = _indexes[path] = HashIndex(path)
        return index


def content_hash(path: str | os.PathLike, *, index: HashIndex | None = None, timeout_s: float | None = None) -> str:
    """sha256 hex digest of the file's bytes, streamed; memoised per (real path, size, mtime) in-process
    and in `index` across processes. Raises HashTimeout when reading takes over `timeout_s` seconds."""
    real = os.path.realpath(os.fspath(path))
    st = os.stat(real)
    memo_key = (real, st.st_size, st.st_mtime_ns)
    with _memo_lock:
        hit = _memo.get(memo_key)
    if hit is None and index is not None:
        hit = index.get(memo_key)
    if hit is not None:
        with _memo_lock:
            _memo[memo_key] = hit
        return hit
    deadline = time.monotonic() + timeout_s if timeout_s else None
    digest = hashlib.sha256()
    with open(real, "rb") as f:
        while chunk := f.read(_CHUNK):
            digest.update(chunk)
            if deadline is not None and time.monotonic() > deadline:
                raise HashTimeout(f"hashing took longer than {timeout_s} s (read {f.tell()} of {st.st_size} bytes)")
    value = digest.hexdigest()
    with _memo_lock:
        _memo[memo_key] = value
    if index is not None:
        index.put(memo_key, value)
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


# --- remembered failures -----------------------------------------------------------------------

FAILURES_NAME = "media_failures.jsonl"


@dataclasses.dataclass(frozen=True)
class Failure:
    """Why a media file could not be hashed (`scope` "hash") or decoded with one frame key
    (`scope` "decode:<key>"): a reject `kind` and `reason`, and the timeout it had (None: none)."""

    kind: str
    reason: str
    timeout_s: float | None = None

    def applies(self, timeout_s: float | None) -> bool:
        """A timeout is worth trying again only with a longer limit (or none); other failures always apply."""
        if self.kind != "timeout":
            return True
        if not timeout_s:
            return False
        return self.timeout_s is not None and timeout_s <= self.timeout_s


class FailureIndex:
    """A persisted (real path, size, mtime_ns, scope) → Failure map beside the hash index, so a media
    file that timed out or could not be decoded is tried (and logged) once per run folder, not by
    every command. A changed file (size or mtime) is a new key; the last line for a key wins (a
    `cleared` line forgets it); a torn last line is ignored."""

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = os.fspath(path)
        self._lock = threading.Lock()
        self._known: dict[tuple[str, int, int, str], Failure] = {}
        self._load()

    def _load(self) -> None:
        try:
            with open(self.path, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            return
        for line in data[: data.rfind(b"\n") + 1].splitlines():
            try:
                e = json.loads(line)
                key = (e["path"], int(e["size"]), int(e["mtime_ns"]), str(e["scope"]))
                if e.get("cleared"):
                    self._known.pop(key, None)
                else:
                    limit = e.get("timeout_s")
                    self._known[key] = Failure(str(e["kind"]), str(e["reason"]),
                                               float(limit) if limit is not None else None)
            except (ValueError, KeyError, TypeError):
                continue

    @staticmethod
    def file_key(path: str) -> tuple[str, int, int] | None:
        """(real path, size, mtime_ns) of a file, None when it cannot be stat'ed."""
        real = os.path.realpath(path)
        try:
            st = os.stat(real)
        except OSError:
            return None
        return real, st.st_size, st.st_mtime_ns

    def get(self, path: str, scope: str) -> Failure | None:
        key = self.file_key(path)
        if key is None:
            return None
        with self._lock:
            return self._known.get((*key, scope))

    def _append(self, entry: dict) -> None:
        os.makedirs(os.path.dirname(self.path) or ".", exist_ok=True)
        with open(self.path, "a", encoding="utf-8") as f:  # one short O_APPEND write: lines never interleave
            f.write(json.dumps(entry) + "\n")

    def put(self, path: str, scope: str, failure: Failure) -> None:
        key = self.file_key(path)
        if key is None:
            return
        with self._lock:
            self._known[(*key, scope)] = failure
            self._append({"path": key[0], "size": key[1], "mtime_ns": key[2], "scope": scope,
                          **dataclasses.asdict(failure), "at": time.strftime("%Y-%m-%dT%H:%M:%S%z")})

    def forget(self, path: str, scope: str) -> None:
        key = self.file_key(path)
        if key is None:
            return
        with self._lock:
            if self._known.pop((*key, scope), None) is not None:
                self._append({"path": key[0], "size": key[1], "mtime_ns": key[2], "scope": scope, "cleared": True})


def failure_index_for(frames_uri: str | None) -> FailureIndex | None:
    """The run folder's failure index beside a local frames table, read now (None for object stores or
    no table)."""
    if not frames_uri:
        return None
    uri = frames_uri.removeprefix("file://")
    if "://" in uri:
        return None
    return FailureIndex(os.path.join(os.path.dirname(os.path.abspath(uri)), FAILURES_NAME))
