"""The Lance `frames` dataset: one row per (media content, frame parameters) key.

Frames are stored as raw uint8 bytes in a `large_binary` column with their shape beside them; the
metadata every stage needs (native fps, sampled indices, total frames, duration, parameters) travels
in the same row so nothing is trusted blindly.

Writing is two-phase (Lance's distributed-write pattern): any process writes data files with
`write_fragment` and hands back small fragment descriptions; one process commits them with
`commit_fragments`, which is atomic. Files written but never committed (a build killed in between)
are invisible to readers and are simply redone by the next build.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterable, Mapping

import lance
import numpy as np
import pyarrow as pa
from lance.fragment import FragmentMetadata, write_fragments

from evr1.video.clip import FrameParams, VideoClip
from evr1.video.sampling import RULES_VERSION
from evr1.cache.keys import params_json

FRAMES_SCHEMA = pa.schema(
    [
        pa.field("key", pa.string(), nullable=False),
        pa.field("content_hash", pa.string(), nullable=False),
        pa.field("kind", pa.string(), nullable=False),  # video | image
        pa.field("frames", pa.large_binary(), nullable=False),  # uint8, C order, `shape`
        pa.field("shape", pa.list_(pa.int32()), nullable=False),  # (T, H, W, 3); T = 1 for images
        pa.field("fps", pa.float64()),  # native fps (0 for images)
        pa.field("frame_indices", pa.list_(pa.int32())),
        pa.field("timestamps", pa.list_(pa.float64())),  # index / native fps: what Qwen3-VL prints
        pa.field("pts_seconds", pa.list_(pa.float64())),  # true presentation times (differ for VFR)
        pa.field("total_frames", pa.int64()),
        pa.field("duration", pa.float64()),
        pa.field("params", pa.string()),  # canonical JSON of FrameParams
        pa.field("rules_version", pa.string()),
        pa.field("source_path", pa.string()),  # first path seen with this content
    ]
)
_META_COLUMNS = [f.name for f in FRAMES_SCHEMA if f.name != "frames"]


def clip_row(
    key: str, content_hash: str, kind: str, clip: VideoClip, params: FrameParams, source_path: str
) -> dict:
    """A `frames` row for a decoded clip (images: a VideoClip with one frame, fps 0)."""
    frames = np.ascontiguousarray(clip.frames, dtype=np.uint8)
    fps = float(clip.fps)
    return {
        "key": key,
        "content_hash": content_hash,
        "kind": kind,
        "frames": frames.tobytes(),
        "shape": list(frames.shape),
        "fps": fps,
        "frame_indices": [int(i) for i in clip.frame_indices],
        "timestamps": [i / fps if fps > 0 else 0.0 for i in clip.frame_indices],
        "pts_seconds": [float(t) for t in clip.extra.get("pts_seconds") or []] or None,
        "total_frames": int(clip.total_frames),
        "duration": float(clip.duration),
        "params": params_json(params, kind),
        "rules_version": RULES_VERSION,
        "source_path": source_path,
    }


def _row_clip(row: Mapping, frames_buffer) -> VideoClip:
    """Rebuild a VideoClip from a row's metadata and its frame bytes (copied once: writable, like decoded)."""
    frames = np.frombuffer(frames_buffer, dtype=np.uint8).reshape(row["shape"]).copy()
    extra = {"sample_fps": len(row["frame_indices"]) / row["total_frames"] * row["fps"], "video_backend": "pyav",
             "video_total_frames": row["total_frames"], "cache_key": row["key"]}
    if row.get("pts_seconds") is not None:
        extra["pts_seconds"] = list(row["pts_seconds"])
    return VideoClip(
        frames=frames,
        fps=row["fps"],
        frame_indices=list(row["frame_indices"]),
        total_frames=row["total_frames"],
        duration=row["duration"],
        extra=extra,
    )


def open_frames(uri: str) -> lance.LanceDataset | None:
    """The latest version of the `frames` dataset, or None when nothing was written there yet."""
    try:
        return lance.dataset(uri)
    except (ValueError, FileNotFoundError, OSError):
        return None


def existing_keys(uri: str) -> set[str]:
    """Every key already in the table (empty when the table does not exist)."""
    ds = open_frames(uri)
    if ds is None:
        return set()
    return set(ds.to_table(columns=["key"]).column("key").to_pylist())


def ensure_frames(uri: str) -> lance.LanceDataset:
    """The `frames` dataset at `uri`, created empty (version 1) when missing, so writers can append."""
    ds = open_frames(uri)
    if ds is not None:
        return ds
    try:
        return lance.write_dataset(FRAMES_SCHEMA.empty_table(), uri, schema=FRAMES_SCHEMA, mode="create")
    except (OSError, ValueError):  # another builder created it first
        ds = open_frames(uri)
        if ds is None:
            raise
        return ds


def write_fragment(uri: str, rows: Iterable[Mapping]) -> list[dict]:
    """Write rows as data files of the existing dataset at `uri` without committing them.

    Returns JSON-able fragment descriptions for `commit_fragments` (small: safe to ship through Ray).
    """
    table = pa.Table.from_pylist(list(rows), schema=FRAMES_SCHEMA)
    if table.num_rows == 0:
        return []
    return [f.to_json() for f in write_fragments(table, uri, schema=FRAMES_SCHEMA)]


def commit_fragments(uri: str, fragments: Iterable[dict]) -> int:
    """Append written fragments to `uri` in one atomic commit; return the new version.

    Concurrent appends by other builders are rebased by Lance, not lost.
    """
    metas = [FragmentMetadata.from_json(json.dumps(f)) for f in fragments]
    ds = ensure_frames(uri)
    if not metas:
        return ds.version
    return lance.LanceDataset.commit(uri, lance.LanceOperation.Append(metas), read_version=ds.version).version


def append_rows(uri: str, rows: Iterable[Mapping]) -> int:
    """Write and commit rows in one atomic commit (creating the table on first write); return the version."""
    ensure_frames(uri)
    return commit_fragments(uri, write_fragment(uri, rows))


class FrameStore:
    """An opened `frames` table with a key → row offset map, for O(1) reads by key.

    The map comes from one scan of the `key` column. The table is append-only, so offsets stay valid;
    on a miss the store re-opens the latest version once, so rows appended since are found.
    """

    def __init__(self, uri: str) -> None:
        self.uri = uri
        self._lock = threading.Lock()
        self._ds: lance.LanceDataset | None = None
        self._offsets: dict[str, int] = {}
        self._load()

    def _load(self) -> None:
        ds = open_frames(self.uri)
        offsets: dict[str, int] = {}
        if ds is not None:
            for offset, key in enumerate(ds.to_table(columns=["key"]).column("key").to_pylist()):
                offsets.setdefault(key, offset)  # a key written twice by racing builders: first wins
        self._ds, self._offsets = ds, offsets

    def refresh(self) -> bool:
        """Re-open if a newer version exists; return whether anything changed."""
        latest = open_frames(self.uri)
        with self._lock:
            if latest is None or (self._ds is not None and latest.version == self._ds.version):
                return False
            self._load()
            return True

    def __contains__(self, key: str) -> bool:
        return key in self._offsets

    def read(
        self, key: str, *, params: FrameParams | None = None, refresh_on_miss: bool = True
    ) -> VideoClip | None:
        """The clip for `key` or None. With `params`, the stored parameters and rules must match too
        (spec §7.1 item 12: never trust a cache entry blindly)."""
        with self._lock:
            offset, ds = self._offsets.get(key), self._ds
        if offset is None:
            if refresh_on_miss and self.refresh():
                return self.read(key, params=params, refresh_on_miss=False)
            return None
        table = ds.take([offset])
        frames_buffer = table.column("frames")[0].as_buffer()  # zero-copy view of the Arrow data
        row = table.drop_columns(["frames"]).to_pylist()[0]
        if row["key"] != key:  # never return another entry's frames
            raise RuntimeError(f"frames table {self.uri} changed under the reader (offset {offset})")
        expected = params_json(params, row["kind"]) if params is not None else None
        if params is not None and (row["params"], row["rules_version"]) != (expected, RULES_VERSION):
            raise RuntimeError(
                f"frames row {key} in {self.uri} was built with params {row['params']} / rules "
                f"{row['rules_version']}, expected {expected} / {RULES_VERSION}"
            )
        return _row_clip(row, frames_buffer)

    def metadata(self, key: str) -> dict | None:
        """Row metadata without the frame bytes (params, shape, indices ...)."""
        with self._lock:
            offset, ds = self._offsets.get(key), self._ds
        if offset is None:
            return None
        row = ds.take([offset], columns=_META_COLUMNS).to_pylist()[0]
        row["params"] = json.loads(row["params"])
        return row


_stores: dict[str, FrameStore] = {}
_stores_lock = threading.Lock()


def frame_store(uri: str) -> FrameStore:
    """The process-wide cached FrameStore for `uri`."""
    with _stores_lock:
        store = _stores.get(uri)
        if store is None:
            store = _stores[uri] = FrameStore(uri)
        return store


def read_clip(uri: str, key: str, params: FrameParams | None = None) -> VideoClip | None:
    """The cached clip for `key`, or None on a miss (the opened dataset is cached per uri)."""
    return frame_store(uri).read(key, params=params)
