"""Frame-cache benchmark (issue 5), measured side by side in one run on clips it generates.

Clips: `--clips` H.264 videos, 1280×720, 30 fps, `--seconds` long (default 30 s), encoded with
PyAV's libx264 (preset veryfast, crf 23, x264's default GOP and B-frames) into `--workdir`
(reused by later runs). Parameters: 64 frames per video (nframes=64) at factor 32 with the training
budget of spec §3.1 (min 3136, max 262144 pixels), i.e. 64 × 384 × 672 × 3 uint8 per video.

Figures:
  1. a 64-frame sample read from the cache (FrameStore.read: decompressed from the memory-mapped
     Lance data file) vs decoded on the fly (decode_video); also the same read through Lance's own
     `take_blobs` (the path used for remote tables);
  2. the cache vs the reference's format, one float32 T×C×H×W `.pt` file per video read with
     torch.load: read latency and bytes on disk (and the LZ4 ratio over raw uint8, which depends on
     the content: these clips carry film grain, so they compress poorly);
  3. build throughput in source frames decoded per second with 1 and 2 Ray workers vs
     `ffmpeg -threads 1 -i clip -f null -` on the same files (skipped, and said so, without ffmpeg).

Run:  PYTHONPATH=. .venv/bin/python benchmarks/bench_cache.py [--clips 4] [--seconds 30]
Prints a Markdown table, then one JSON line. `--smoke`: the same path at the smallest sizes (one 1 s
clip of 64×112, 2 frames, 1 repeat, a fresh temporary workdir), seconds long: CI runs it
(tests/benchmarks) so the script cannot rot; its figures mean nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import av
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from evr1.cache import build_frame_cache, content_hash, frame_key  # noqa: E402
from evr1.cache.store import FrameStore  # noqa: E402
from evr1.video import FrameParams, decode_video  # noqa: E402

_META = ["key", "shape", "codec", "frame_sizes", "frames", "_rowaddr"]

PARAMS = FrameParams(nframes=64, factor=32, min_pixels=3136, max_pixels=262144)
HEIGHT, WIDTH, FPS = 720, 1280, 30
# --smoke: a clip a few frames long and a few hundred pixels wide, sampled to 2 frames.
SMOKE_HEIGHT, SMOKE_WIDTH = 64, 112
SMOKE_PARAMS = FrameParams(nframes=2, factor=32, min_pixels=1024, max_pixels=SMOKE_HEIGHT * SMOKE_WIDTH)


# --- clips ---------------------------------------------------------------------------------------


def _frame(i: int, noise: list[np.ndarray], height: int = HEIGHT, width: int = WIDTH) -> np.ndarray:
    """Moving gradients, a checkerboard that flips every 10 frames, a moving box and film grain."""
    y = np.arange(height, dtype=np.int32)[:, None]
    x = np.arange(width, dtype=np.int32)[None, :]
    r = ((x + 3 * i) % 256).astype(np.uint8)
    g = ((y + 2 * i) % 256).astype(np.uint8)
    b = (((x // 40 + y // 40 + i // 10) % 2) * 160).astype(np.uint8)
    img = np.stack(np.broadcast_arrays(r, g, b), axis=-1).copy()
    box = min(200, height // 4, width // 4)
    cx = int((width - box) * (0.5 + 0.5 * np.sin(i / 25)))
    cy = int((height - box) * (0.5 + 0.5 * np.cos(i / 31)))
    img[cy : cy + box, cx : cx + box] = (250, 250, 40)
    return img + noise[i % len(noise)]


def make_clip(path: Path, seconds: int, seed: int, *, height: int = HEIGHT, width: int = WIDTH) -> Path:
    """A `seconds` long H.264 clip of height × width at FPS in `path` (kept: a later run reuses it)."""
    if path.exists():
        return path
    rng = np.random.default_rng(seed)
    noise = [rng.integers(0, 4, (height, width, 3), dtype=np.uint8) for _ in range(7)]
    tmp = path.with_suffix(".part.mp4")
    with av.open(str(tmp), mode="w") as out:
        stream = out.add_stream("libx264", rate=FPS)
        stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
        stream.options = {"preset": "veryfast", "crf": "23"}
        for i in range(seconds * FPS):
            for packet in stream.encode(av.VideoFrame.from_ndarray(_frame(i + 97 * seed, noise, height, width),
                                                                 format="rgb24")):
                out.mux(packet)
        for packet in stream.encode():
            out.mux(packet)
    tmp.rename(path)
    return path


# --- helpers -------------------------------------------------------------------------------------


def median_s(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def tree_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def _start_ray(num_cpus: int) -> None:
    import ray

    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    root = str(Path(__file__).resolve().parents[1])
    ray.init(num_cpus=num_cpus, include_dashboard=False, object_store_memory=256 << 20, logging_level="ERROR",
             _temp_dir=tempfile.mkdtemp(prefix="ray", dir="/tmp"),
             runtime_env={"env_vars": {"PYTHONPATH": root}})


def build_fps(items, uri: Path, workers: int, total_frames: int, params: FrameParams = PARAMS) -> tuple[float, float]:
    """(seconds, source frames per second) of a fresh build with `workers` Ray workers."""
    shutil.rmtree(uri, ignore_errors=True)
    t = time.perf_counter()
    report = build_frame_cache(items, str(uri), params, workers=workers, progress=False, timeout_s=600)
    seconds = time.perf_counter() - t
    assert report.decoded == len(items) and not report.rejects, report.rejects
    return seconds, total_frames / seconds


def ffmpeg_fps(paths: list[Path], total_frames: int) -> float | None:
    """Source frames per second of `ffmpeg -threads 1 -f null` over the clips, one after another."""
    if shutil.which("ffmpeg") is None:
        return None
    t = time.perf_counter()
    for path in paths:
        subprocess.run(["ffmpeg", "-v", "error", "-threads", "1", "-i", str(path), "-f", "null", "-"], check=True)
    return total_frames / (time.perf_counter() - t)


def write_reference_pt(clip, path: Path) -> None:
    """The reference's offline cache file (spec §3.3): float32 T×C×H×W frames plus metadata, torch.save."""
    import torch

    frames = torch.from_numpy(clip.frames).permute(0, 3, 1, 2).float().contiguous()
    torch.save({"frames": frames,
                "metadata": {"fps": clip.fps, "frames_indices": clip.frame_indices,
                             "total_num_frames": clip.total_frames, "video_backend": "pyav"},
                "sample_fps": clip.extra["sample_fps"], "preprocess_version": "qwen3vl_patch16_v1"}, path)


# --- main ----------------------------------------------------------------------------------------


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clips", type=int, default=4)
    ap.add_argument("--seconds", type=int, default=30)
    ap.add_argument("--workdir", type=Path, default=None,
                    help="clips and tables (default: $TMPDIR/evr1_bench_cache; with --smoke a fresh temporary folder)")
    ap.add_argument("--repeats", type=int, default=20, help="cache / .pt reads per clip")
    ap.add_argument("--decode-repeats", type=int, default=2, help="on-the-fly decodes per clip")
    ap.add_argument("--smoke", action="store_true",
                    help="smallest sizes (1 clip of 1 s at 64x112, 2 frames, 1 repeat, temporary workdir): seconds")
    args = ap.parse_args()
    height, width, params = HEIGHT, WIDTH, PARAMS
    if args.smoke:
        args.clips, args.seconds, args.repeats, args.decode_repeats = 1, 1, 1, 1
        height, width, params = SMOKE_HEIGHT, SMOKE_WIDTH, SMOKE_PARAMS
    scratch = args.workdir is None and args.smoke  # smoke runs side by side must not share `out/`
    if args.workdir is None:
        args.workdir = (Path(tempfile.mkdtemp(prefix="evr1_bench_cache_smoke")) if scratch
                        else Path(tempfile.gettempdir()) / "evr1_bench_cache")
    try:
        run(args, height, width, params)
    finally:
        if scratch:
            shutil.rmtree(args.workdir, ignore_errors=True)


def run(args: argparse.Namespace, height: int, width: int, params: FrameParams) -> None:
    import ray
    import torch

    clips_dir = args.workdir / f"clips_{args.seconds}s_{height}p{FPS}"
    clips_dir.mkdir(parents=True, exist_ok=True)
    t = time.perf_counter()
    paths = [make_clip(clips_dir / f"clip{i}.mp4", args.seconds, i, height=height, width=width)
             for i in range(args.clips)]
    encode_s = time.perf_counter() - t
    total_frames = sum(av.open(str(p)).streams.video[0].frames for p in paths)
    items = [(p.stem, str(p), "video") for p in paths]
    out = args.workdir / "out"
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir()

    # 3. Build throughput. Ray is started (and its workers warmed) once, outside the timings.
    _start_ray(num_cpus=2)
    warm = [(p.stem, str(p), "video") for p in [paths[0]]]
    build_frame_cache(warm, str(out / "warm.lance"), FrameParams(nframes=4, factor=32), workers=2, progress=False)
    build_frame_cache(warm, str(out / "warm2.lance"), FrameParams(nframes=6, factor=32), workers=2, progress=False)
    ff = ffmpeg_fps(paths, total_frames)
    one_s, one_fps = build_fps(items, out / "w1.lance", 1, total_frames, params)
    two_s, two_fps = build_fps(items, out / "w2.lance", 2, total_frames, params)
    ray.shutdown()

    # 1 and 2. Reads from the 2-worker table (page cache warm), on-the-fly decodes, the .pt format.
    uri = out / "w2.lance"
    store = FrameStore(str(uri))
    keys = [frame_key(content_hash(p), params) for p in paths]
    reads, lance_reads, decodes, pt_reads, pt_bytes, raw_bytes = [], [], [], [], 0, 0
    for path, key in zip(paths, keys):
        clip = store.read(key, params=params)
        reads.append(median_s(lambda key=key: store.read(key, params=params), args.repeats))
        offset = store._offsets[key]
        row = store._ds.take([offset], columns=_META).to_pylist()[0]
        lance_reads.append(median_s(lambda o=offset, r=row: store._frames(store._ds, {}, o, r), args.repeats))
        raw_bytes += clip.frames.nbytes
        decoded = decode_video(path, params)
        assert decoded.frames.tobytes() == clip.frames.tobytes()  # a hit equals the fallback decode
        decodes.append(median_s(lambda path=path: decode_video(path, params), args.decode_repeats))
        pt = out / f"{path.stem}.pt"
        write_reference_pt(clip, pt)
        pt_bytes += pt.stat().st_size
        pt_reads.append(median_s(lambda pt=pt: torch.load(pt, map_location="cpu", weights_only=False),
                                 args.repeats))
    as_tensor = median_s(lambda: torch.from_numpy(store.read(keys[0], params=params).frames)
                         .permute(0, 3, 1, 2).float(), args.repeats)
    lance_bytes = tree_bytes(uri)
    read_ms, lance_ms, decode_ms, pt_ms = (statistics.median(v) * 1000 for v in (reads, lance_reads, decodes, pt_reads))
    payload_bytes = sum(sum(store.metadata(k)["frame_sizes"]) for k in keys)
    shape = list(clip.frames.shape)

    figures = {
        "smoke": args.smoke, "clips": args.clips, "seconds": args.seconds, "source_frames": total_frames,
        "sample_shape": shape, "encode_s": round(encode_s, 1),
        "cache_read_ms": round(read_ms, 2), "decode_on_the_fly_ms": round(decode_ms, 1),
        "cache_vs_decode_speedup": round(decode_ms / read_ms, 1),
        "cache_read_via_lance_take_blobs_ms": round(lance_ms, 2),
        "lz4_ratio_over_raw_uint8": round(payload_bytes / raw_bytes, 4),
        "cache_read_as_float_tensor_ms": round(as_tensor * 1000, 2),
        "pt_torch_load_ms": round(pt_ms, 2), "cache_vs_pt_read_ratio": round(pt_ms / read_ms, 2),
        "lance_bytes": lance_bytes, "pt_bytes": pt_bytes, "bytes_ratio_lance_over_pt": round(lance_bytes / pt_bytes, 4),
        "ffmpeg_threads1_fps": round(ff, 1) if ff else None,
        "build_1_worker_s": round(one_s, 2), "build_1_worker_fps": round(one_fps, 1),
        "build_2_workers_s": round(two_s, 2), "build_2_workers_fps": round(two_fps, 1),
        "per_worker_vs_ffmpeg": round(one_fps / ff, 3) if ff else None,
        "gain_1_to_2_workers": round(two_fps / one_fps, 2),
        "cpus": os.cpu_count(), "load_avg_1m": round(os.getloadavg()[0], 2),
    }
    ffmpeg_cell = f"{ff:.0f} frames/s" if ff else "skipped: ffmpeg not installed"
    ratio_cell = f"{one_fps / ff:.2f}× (target ≥ 0.7)" if ff else "skipped: ffmpeg not installed"
    print(f"| figure ({args.clips} clips, {args.seconds} s, {height}p, {FPS} fps, H.264; sample {shape}) | value |")
    print("|---|---|")
    print(f"| {shape[0]}-frame sample from the cache | {read_ms:.1f} ms |")
    print(f"| same sample decoded on the fly | {decode_ms:.0f} ms |")
    print(f"| cache speed-up over decoding | {decode_ms / read_ms:.0f}× (target ≥ 100×) |")
    print(f"| same read through Lance take_blobs (remote-table path) | {lance_ms:.1f} ms |")
    print(f"| reference float32 .pt via torch.load | {pt_ms:.1f} ms (cache is {pt_ms / read_ms:.2f}× as fast) |")
    print(f"| cache read as a float32 T×C×H×W tensor | {as_tensor * 1000:.1f} ms |")
    print(f"| bytes on disk, Lance vs .pt | {lance_bytes / 2**20:.1f} MiB vs {pt_bytes / 2**20:.1f} MiB "
          f"({lance_bytes / pt_bytes:.4f}; target ≤ 0.25) |")
    print(f"| LZ4 payload vs raw uint8 (content-dependent) | {payload_bytes / raw_bytes:.4f} |")
    print(f"| ffmpeg -threads 1 -f null | {ffmpeg_cell} |")
    print(f"| build, 1 Ray worker | {one_fps:.0f} frames/s ({one_s:.1f} s) |")
    print(f"| build, 2 Ray workers | {two_fps:.0f} frames/s ({two_s:.1f} s) |")
    print(f"| 1 worker vs ffmpeg | {ratio_cell} |")
    print(f"| gain from 1 to 2 workers | {two_fps / one_fps:.2f}× |")
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
