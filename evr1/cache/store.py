"""The Lance `frames` dataset: one row per (media content, frame parameters) key.

Frames are stored as raw uint8 bytes in a `large_binary` column with their shape beside them; the
metadata every stage needs (native fps, sampled indices, total frames, parameters) travels in the
same row so nothing is trusted blindly. Each `append_rows` call is one atomic Lance commit: a build
killed halfway leaves a readable table holding every batch committed before the kill.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterable, Mapping

import lance
import numpy as np
import pyarrow as pa

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
        "total_frames": int(clip.total_frames),
        "duration": float(clip.duration),
        "params": params_json(params),
        "rules_version": RULES_VERSION,
        "source_path": source_path,
    }


def _row_clip(row: Mapping) -> VideoClip:
    """Rebuild a VideoClip from a row; frames are copied out so they are writable like decoded ones."""
    frames = np.frombuffer(row["frames"], dtype=np.uint8).reshape(row["shape"]).copy()
    return VideoClip(
        frames=frames,
        fps=row["fps"],
        frame_indices=list(row["frame_indices"]),
        total_frames=row["total_frames"],
        duration=row["duration"],
        extra={"sample_fps": len(row["frame_indices"]) / row["total_frames"] * row["fps"], "video_backend": "pyav"},
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


def append_rows(uri: str, rows: Iterable[Mapping]) -> int | None:
    """Append rows in one atomic commit (creating the table on first write); return the new version."""
    table = pa.Table.from_pylist(list(rows), schema=FRAMES_SCHEMA)
    if table.num_rows == 0:
        ds = open_frames(uri)
        return ds.version if ds is not None else None
    mode = "append" if open_frames(uri) is not None else "create"
    return lance.write_dataset(table, uri, mode=mode, schema=FRAMES_SCHEMA).version


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
        row = ds.take([offset]).to_pylist()[0]
        if row["key"] != key:  # never return another entry's frames
            raise RuntimeError(f"frames table {self.uri} changed under the reader (offset {offset})")
        if params is not None and (row["params"], row["rules_version"]) != (params_json(params), RULES_VERSION):
            raise RuntimeError(
                f"frames row {key} in {self.uri} was built with params {row['params']} / rules "
                f"{row['rules_version']}, expected {params_json(params)} / {RULES_VERSION}"
            )
        return _row_clip(row)

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
