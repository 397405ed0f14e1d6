"""The Lance `frames` dataset: one row per (media content, frame parameters) key.

Frames are stored losslessly as one LZ4 block per frame (`codec.py`) in a Lance blob column kept
inline in the row's data file, with their shape and per-frame sizes beside them; the metadata every
stage needs (native fps, sampled indices, total frames, duration, parameters) travels in the same row
so nothing is trusted blindly.

Reading: Lance's own readers (`take`, `take_blobs`, `read_blobs`) copy a 50 MB value several times
(~60 ms). For a local table the store therefore asks Lance only for the blob's descriptor (data file,
byte position, size: the public blob-v2 descriptor) and decompresses straight from the memory-mapped
data file into the returned array; anything else (object stores, other descriptor kinds) goes
through `take_blobs`. Both give the same bytes (tested).

Writing is two-phase (Lance's distributed-write pattern): any process writes data files with
`write_fragment` and hands back small fragment descriptions; one process commits them with
`commit_fragments`, which is atomic. Files written but never committed (a build killed in between)
are invisible to readers; the next build that runs alone removes them (`remove_stray_files`) and
redoes their videos.

`STORE_FORMAT` is stored in the table's schema metadata; a table of another format (e.g. format 1:
raw bytes in a plain `large_binary` column) is refused with `FramesFormatError`, never misread.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import mmap
import os
import threading
from collections.abc import Iterable, Iterator, Mapping

import lance
import numpy as np
import pyarrow as pa
from lance import blob_array, blob_field
from lance.fragment import FragmentMetadata, write_fragments

from evr1.cache.codec import CODEC, decode_frames, encode_frames
from evr1.cache.keys import params_json
from evr1.video.clip import FrameParams, VideoClip
from evr1.video.sampling import RULES_VERSION

STORE_FORMAT = "2"  # bump whenever the stored layout of a row changes
FORMAT_META_KEY = b"evr1.frames_format"
LANCE_FILE_VERSION = "2.2"  # blob v2 needs file format >= 2.2
_INLINE = 1 << 40  # blob size thresholds: keep every payload inline in its row's data file
_BLOB_KIND_INLINE = 0  # blob-v2 descriptor kind: bytes at `position` in the row's own data file

_META_FIELDS = [
    pa.field("key", pa.string(), nullable=False),
    pa.field("content_hash", pa.string(), nullable=False),
    pa.field("kind", pa.string(), nullable=False),  # video | image
    pa.field("shape", pa.list_(pa.int32()), nullable=False),  # (T, H, W, 3); T = 1 for images
    pa.field("codec", pa.string(), nullable=False),  # codec.CODEC
    pa.field("frame_sizes", pa.list_(pa.int64()), nullable=False),  # stored bytes per frame, in order
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
_META_SCHEMA = pa.schema(_META_FIELDS)
_META_COLUMNS = [f.name for f in _META_FIELDS]
FRAMES_SCHEMA = pa.schema(
    _META_FIELDS[:3]
    + [blob_field("frames", nullable=False, inline_size_threshold=_INLINE, dedicated_size_threshold=_INLINE)]
    + _META_FIELDS[3:],
    metadata={FORMAT_META_KEY: STORE_FORMAT.encode()},
)


class FramesFormatError(RuntimeError):
    """The table at a frames uri was written in another store format (never read as this one)."""


def clip_row(
    key: str, content_hash: str, kind: str, clip: VideoClip, params: FrameParams, source_path: str
) -> dict:
    """A `frames` row for a decoded clip (images: a VideoClip with one frame, fps 0).

    `frames` holds the encoded payload (see codec.py), not the raw pixels.
    """
    frames = np.ascontiguousarray(clip.frames, dtype=np.uint8)
    payload, sizes = encode_frames(frames)
    fps = float(clip.fps)
    return {
        "key": key,
        "content_hash": content_hash,
        "kind": kind,
        "frames": payload,
        "shape": list(frames.shape),
        "codec": CODEC,
        "frame_sizes": sizes,
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


def _row_clip(row: Mapping, frames: np.ndarray) -> VideoClip:
    """Rebuild a VideoClip from a row's metadata and its decoded frames."""
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


def open_table(uri: str) -> lance.LanceDataset | None:
    """The latest version of any Lance dataset at `uri`, or None when nothing was written there yet."""
    try:
        return lance.dataset(uri)
    except (ValueError, FileNotFoundError, OSError):
        return None


def check_format(ds: lance.LanceDataset, uri: str) -> lance.LanceDataset:
    """`ds` when it is a frames table of STORE_FORMAT, else FramesFormatError naming the uri and format."""
    found = (ds.schema.metadata or {}).get(FORMAT_META_KEY, b"1").decode()  # format 1 had no marker
    if found != STORE_FORMAT:
        raise FramesFormatError(
            f"frames table {uri} has store format {found}; this evr1 reads and writes format {STORE_FORMAT}. "
            "Delete the table (it is a cache) or set another cache uri, then rebuild it"
        )
    return ds


def open_frames(uri: str) -> lance.LanceDataset | None:
    """The latest version of the `frames` dataset, or None when nothing was written there yet.

    Raises FramesFormatError for a table of another store format.
    """
    ds = open_table(uri)
    return None if ds is None else check_format(ds, uri)


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
        return lance.write_dataset(FRAMES_SCHEMA.empty_table(), uri, schema=FRAMES_SCHEMA, mode="create",
                                   data_storage_version=LANCE_FILE_VERSION)
    except (OSError, ValueError):  # another builder created it first
        ds = open_frames(uri)
        if ds is None:
            raise
        return ds


def _rows_table(rows: list[Mapping]) -> pa.Table:
    meta = pa.Table.from_pylist(rows, schema=_META_SCHEMA)
    frames = blob_array([row["frames"] for row in rows])
    columns = [frames if name == "frames" else meta.column(name) for name in FRAMES_SCHEMA.names]
    return pa.Table.from_arrays(columns, schema=FRAMES_SCHEMA)


def write_fragment(uri: str, rows: Iterable[Mapping]) -> list[dict]:
    """Write rows as data files of the existing dataset at `uri` without committing them.

    Returns JSON-able fragment descriptions for `commit_fragments` (small: safe to ship through Ray).
    """
    rows = list(rows)
    if not rows:
        return []
    table = _rows_table(rows)
    return [f.to_json() for f in write_fragments(table, uri, schema=FRAMES_SCHEMA,
                                                 data_storage_version=LANCE_FILE_VERSION)]


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


@contextlib.contextmanager
def build_lock(uri: str) -> Iterator[bool]:
    """Hold a shared lock on a local table for the length of a build; yields True when no other build
    holds it (then files no version references are strays of a killed build, safe to remove).

    The kernel drops a killed process's lock, so a crash never leaves the table locked."""
    root = _local_root(uri)
    if root is None:
        yield False
        return
    with open(f"{root}.build-lock", "a+b") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            alone = True
        except BlockingIOError:
            alone = False
        fcntl.flock(f, fcntl.LOCK_SH)  # downgrade: concurrent builds may proceed, none may clean
        try:
            yield alone
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def remove_stray_files(uri: str) -> list[str]:
    """Delete data files under a local table that no version references (written by a build killed
    before its commit); returns their paths. Call only while holding `build_lock` alone."""
    root, ds = _local_root(uri), open_table(uri)
    if root is None or ds is None:
        return []
    referenced: set[str] = set()
    for version in ds.versions():
        for fragment in lance.dataset(uri, version=version["version"]).get_fragments():
            referenced.update(os.path.basename(d.path) for d in fragment.data_files())
    data = os.path.join(root, "data")
    names = os.listdir(data) if os.path.isdir(data) else []
    stray = [os.path.join(data, n) for n in names if n not in referenced and os.path.isfile(os.path.join(data, n))]
    for path in stray:
        os.remove(path)
    return stray


def _local_root(uri: str) -> str | None:
    """The absolute local directory of a dataset uri (so a later chdir does not matter), or None for
    object stores."""
    if uri.startswith("file://"):
        uri = uri[len("file://"):]
    return None if "://" in uri else os.path.abspath(uri)


def _data_files(ds: lance.LanceDataset, root: str | None) -> dict[int, str]:
    """fragment id → local path of its only data file (fragments with several files, other storage
    bases or a remote table are left out: their blobs are read through Lance)."""
    if root is None:
        return {}
    files = {}
    for fragment in ds.get_fragments():
        data = fragment.data_files()
        if len(data) == 1 and data[0].base_id is None:
            files[fragment.fragment_id] = os.path.join(root, "data", data[0].path)
    return files


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
        self._files: dict[int, str] = {}
        self._load()

    def _load(self) -> None:
        ds = open_frames(self.uri)
        offsets: dict[str, int] = {}
        files: dict[int, str] = {}
        if ds is not None:
            for offset, key in enumerate(ds.to_table(columns=["key"]).column("key").to_pylist()):
                offsets.setdefault(key, offset)  # a key written twice by racing builders: first wins
            files = _data_files(ds, _local_root(ds.uri))
        self._ds, self._offsets, self._files = ds, offsets, files

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

    def _frames(self, ds: lance.LanceDataset, files: dict[int, str], offset: int, row: Mapping) -> np.ndarray:
        """Decode a row's frames: from the memory-mapped data file when the blob is inline in a local
        file, else through Lance's `take_blobs`."""
        what = f"frames row {row['key']} in {self.uri}"
        if row["codec"] != CODEC:
            raise FramesFormatError(f"{what}: codec {row['codec']!r}, this evr1 reads {CODEC!r}")
        blob, path = row["frames"], files.get(row["_rowaddr"] >> 32)
        if blob["kind"] == _BLOB_KIND_INLINE and path is not None:
            with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
                if blob["position"] + blob["size"] <= len(mapped):
                    view = memoryview(mapped)[blob["position"] : blob["position"] + blob["size"]]
                    try:
                        return decode_frames(view, row["frame_sizes"], row["shape"], what)
                    finally:
                        view.release()
        handle = ds.take_blobs("frames", indices=[offset], buffer_size=0)[0]
        payload = bytearray(handle.size())
        handle.readinto(payload)
        return decode_frames(payload, row["frame_sizes"], row["shape"], what)

    def read(
        self, key: str, *, params: FrameParams | None = None, refresh_on_miss: bool = True
    ) -> VideoClip | None:
        """The clip for `key` or None. With `params`, the stored parameters and rules must match too
        (spec §7.1 item 12: never trust a cache entry blindly). The frames are a fresh writable array."""
        with self._lock:
            offset, ds, files = self._offsets.get(key), self._ds, self._files
        if offset is None:
            if refresh_on_miss and self.refresh():
                return self.read(key, params=params, refresh_on_miss=False)
            return None
        row = ds.take([offset], columns=[*_META_COLUMNS, "frames", "_rowaddr"]).to_pylist()[0]
        if row["key"] != key:  # never return another entry's frames
            raise RuntimeError(f"frames table {self.uri} changed under the reader (offset {offset})")
        expected = params_json(params, row["kind"]) if params is not None else None
        if params is not None and (row["params"], row["rules_version"]) != (expected, RULES_VERSION):
            raise RuntimeError(
                f"frames row {key} in {self.uri} was built with params {row['params']} / rules "
                f"{row['rules_version']}, expected {expected} / {RULES_VERSION}"
            )
        return _row_clip(row, self._frames(ds, files, offset, row))

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
