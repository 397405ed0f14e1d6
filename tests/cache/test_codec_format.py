"""The stored frame format: per-frame LZ4 codec, blob reads from the mapped file, old-format tables."""

from __future__ import annotations

import lance
import numpy as np
import pyarrow as pa
import pytest

from evr1.cache import FrameReader, build_frame_cache
from evr1.cache.codec import decode_frames, encode_frames
from evr1.cache.store import FrameStore, FramesFormatError, append_rows, clip_row, existing_keys
from evr1.video import FrameParams
from evr1.video.clip import VideoClip

_rng = np.random.default_rng(0)
NOISE = _rng.integers(0, 256, (3, 16, 24, 3), dtype=np.uint8)
FLAT = np.full((3, 16, 24, 3), 200, dtype=np.uint8)
MIXED = np.concatenate([NOISE[:1], FLAT[:1], NOISE[1:2]])
GRADIENT = np.broadcast_to(np.arange(24, dtype=np.uint8)[None, None, :, None], (2, 16, 24, 3)).copy()


@pytest.mark.parametrize(
    "frames, stored_raw",
    [
        (NOISE, [True, True, True]),  # incompressible: kept raw, never expanded
        (FLAT, [False, False, False]),
        (MIXED, [True, False, True]),  # chosen per frame
        (GRADIENT, [False, False]),
        (NOISE[:1], [True]),  # an image is one frame
    ],
)
def test_codec_round_trip_is_lossless(frames, stored_raw):
    payload, sizes = encode_frames(frames)
    frame_bytes = frames[0].nbytes
    assert [s == frame_bytes for s in sizes] == stored_raw and sum(sizes) == len(payload) <= frames.nbytes
    out = decode_frames(payload, sizes, frames.shape, "row x")
    assert out.dtype == np.uint8 and out.shape == frames.shape and out.tobytes() == frames.tobytes()
    assert out.flags.writeable and out.flags.c_contiguous


@pytest.mark.parametrize(
    "mangle, message",
    [
        (lambda p, s: (p[:-1], s), "do not match"),  # truncated payload
        (lambda p, s: (p, s[:-1]), "do not match"),  # a frame missing from the sizes
        (lambda p, s: (b"\xff" * len(p), s), "frame 0"),  # garbage where an LZ4 block should be
    ],
)
def test_corrupt_payload_is_an_error_naming_the_row(mangle, message):
    payload, sizes = encode_frames(FLAT)
    bad_payload, bad_sizes = mangle(payload, sizes)
    with pytest.raises(ValueError, match=f"row k1.*{message}"):
        decode_frames(bad_payload, bad_sizes, FLAT.shape, "row k1")


def _clip(frames: np.ndarray) -> VideoClip:
    n = len(frames)
    return VideoClip(frames=frames, fps=8.0, frame_indices=list(range(n)), total_frames=2 * n, duration=n / 4)


def test_mapped_file_read_equals_lance_blob_read(tmp_path):
    """The fast path (decompress from the memory-mapped data file) gives exactly Lance's own bytes."""
    uri = str(tmp_path / "frames.lance")
    params = FrameParams(factor=28)
    rows = [clip_row(f"k{i}", "h", "video", _clip(f), params, "p") for i, f in enumerate((MIXED, GRADIENT))]
    append_rows(uri, rows[:1])
    append_rows(uri, rows[1:])
    store = FrameStore(uri)
    assert len(store._files) == 2  # both rows are served from their local data files
    for offset, (row, frames) in enumerate(zip(rows, (MIXED, GRADIENT))):
        fast = store.read(row["key"], params=params).frames
        meta = store._ds.take([offset], columns=["key", "shape", "codec", "frame_sizes", "frames", "_rowaddr"])
        through_lance = store._frames(store._ds, {}, offset, meta.to_pylist()[0])
        assert fast.tobytes() == through_lance.tobytes() == frames.tobytes()
        assert store._ds.take_blobs("frames", indices=[offset])[0].read() == row["frames"]


def _format_1_table(uri: str) -> None:
    """A table as the previous evr1 wrote it: raw frame bytes in a plain large_binary column, no marker."""
    schema = pa.schema([pa.field("key", pa.string()), pa.field("frames", pa.large_binary()),
                        pa.field("shape", pa.list_(pa.int32()))])
    lance.write_dataset(pa.table({"key": ["k"], "frames": [FLAT.tobytes()], "shape": [list(FLAT.shape)]},
                                 schema=schema), uri)


@pytest.mark.parametrize(
    "use",
    [
        lambda uri, media: FrameStore(uri),
        lambda uri, media: existing_keys(uri),
        lambda uri, media: FrameReader(uri, FrameParams(factor=28)).video(media["clip"]),
        lambda uri, media: build_frame_cache([("r", str(media["clip"]), "video")], uri, FrameParams(factor=28),
                                             workers=0, progress=False),
    ],
    ids=["store", "existing_keys", "reader", "builder"],
)
def test_old_format_table_is_refused_not_misread(use, media, tmp_path):
    uri = str(tmp_path / "old.lance")
    _format_1_table(uri)
    with pytest.raises(FramesFormatError, match=f"{uri} has store format 1.*format 2"):
        use(uri, media)
