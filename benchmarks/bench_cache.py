"""Frame-cache figures: read-by-key latency for the `frames` layout vs a blob-v2 column, and build time.

Run: .venv/bin/python benchmarks/bench_cache.py   (prints one JSON line)
Rows hold 16×224×224×3 uint8 random frames (2.4 MB), as in stack-feasibility §5.
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import lance
import numpy as np
import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from evr1.cache import build_frame_cache  # noqa: E402
from evr1.cache.store import FrameStore, append_rows  # noqa: E402
from evr1.video import FrameParams, VideoClip  # noqa: E402
from evr1.cache.store import clip_row  # noqa: E402
from tests.video.media import write_video  # noqa: E402

ROWS, SHAPE = 64, (16, 224, 224, 3)


def median_ms(fn, keys) -> float:
    times = []
    for k in keys:
        t = time.perf_counter()
        fn(k)
        times.append((time.perf_counter() - t) * 1000)
    return round(statistics.median(times), 3)


def main() -> None:
    tmp = Path(tempfile.mkdtemp())
    rng = np.random.default_rng(0)
    params = FrameParams()
    rows = []
    for i in range(ROWS):
        clip = VideoClip(rng.integers(0, 256, SHAPE, dtype=np.uint8), 30.0, list(range(16)), 300, 10.0)
        rows.append(clip_row(f"k{i:04d}", "h", "video", clip, params, f"v{i}.mp4"))
    uri = str(tmp / "frames.lance")
    for i in range(0, ROWS, 8):
        append_rows(uri, rows[i : i + 8])
    store = FrameStore(uri)
    keys = [f"k{i:04d}" for i in rng.permutation(ROWS)]
    large_binary = median_ms(store.read, keys)

    # Same data with frames in a blob-v2 column: metadata take + take_blobs(...).readall().
    blob_uri = str(tmp / "blob.lance")
    table = pa.table({"key": [r["key"] for r in rows], "shape": [r["shape"] for r in rows],
                      "frames": lance.blob_array([r["frames"] for r in rows])},
                     schema=pa.schema([pa.field("key", pa.string()), pa.field("shape", pa.list_(pa.int32())),
                                       lance.blob_field("frames")]))
    ds = lance.write_dataset(table, blob_uri)
    offsets = {k: i for i, k in enumerate(ds.to_table(columns=["key"]).column("key").to_pylist())}

    def blob_read(key):
        off = offsets[key]
        shape = ds.take([off], columns=["shape"]).column("shape")[0].as_py()
        data = ds.take_blobs("frames", indices=[off])[0].readall()
        return np.frombuffer(data, np.uint8).reshape(shape).copy()

    blob = median_ms(blob_read, keys)

    # Build time: 16 distinct 2 s clips, serial vs 2 Ray workers (Ray start-up included).
    items = []
    for i in range(16):
        path = write_video(tmp / f"v{i}.mp4", n_frames=16 + i)
        items.append((str(i), str(path), "video"))
    t = time.perf_counter()
    build_frame_cache(items, str(tmp / "serial.lance"), params, workers=0, progress=False)
    serial_s = time.perf_counter() - t
    t = time.perf_counter()
    build_frame_cache(items, str(tmp / "ray.lance"), params, workers=2, progress=False)
    ray_s = time.perf_counter() - t
    print(json.dumps({
        "read_by_key_ms_large_binary": large_binary, "read_by_key_ms_blob_v2": blob,
        "row_bytes": int(np.prod(SHAPE)), "rows": ROWS,
        "build_16_clips_serial_s": round(serial_s, 2), "build_16_clips_ray2_s_incl_init": round(ray_s, 2),
    }))


if __name__ == "__main__":
    main()
