"""Media hashing (issue 16): the first hash of a file, the same file found in the run folder's persisted
index by a fresh process (what `train` and `eval` do after `cache`), and hashing under a timeout.

Files: `--files` files of `--mb` MiB of random bytes in `--workdir` (page cache warm after the first
read, so the first figure is a lower bound for a cold disk). The index lookup runs in a new Python
process per repeat, as a later command would.

Run:  PYTHONPATH=. .venv/bin/python benchmarks/bench_media_hash.py [--files 4] [--mb 512]
Prints one JSON line. `--smoke`: the same path at the smallest sizes (1 file of 1 MiB, 1 lookup, a fresh
temporary workdir), seconds long: CI runs it (tests/benchmarks) so the script cannot rot.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from evr1.cache.keys import HashTimeout, content_hash, hash_index_for  # noqa: E402

LOOKUP = """
import sys, time
from evr1.cache.keys import content_hash, hash_index_for
t0 = time.perf_counter()
index = hash_index_for(sys.argv[1])
for path in sys.argv[2:]:
    content_hash(path, index=index)
print(time.perf_counter() - t0)
"""


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--files", type=int, default=4)
    ap.add_argument("--mb", type=int, default=512)
    ap.add_argument("--workdir", default=None)
    ap.add_argument("--lookups", type=int, default=3, help="fresh-process index lookups (the fastest is reported)")
    ap.add_argument("--timeout-s", type=float, default=0.05, help="the timeout of the last figure")
    ap.add_argument("--smoke", action="store_true",
                    help="smallest sizes (1 file of 1 MiB, 1 lookup, a 1 µs timeout so that it fires): seconds")
    args = ap.parse_args()
    if args.smoke:
        args.files, args.mb, args.lookups, args.timeout_s = 1, 1, 1, 1e-6
    work = Path(args.workdir or tempfile.mkdtemp(prefix="bench-hash-"))
    work.mkdir(parents=True, exist_ok=True)
    media = []
    for i in range(args.files):
        path = work / f"m{i}.bin"
        if not path.exists() or path.stat().st_size != args.mb << 20:
            with open(path, "wb") as f:
                for _ in range(args.mb):
                    f.write(os.urandom(1 << 20))
        media.append(str(path))
    frames_uri = str(work / "lance" / "frames.lance")
    index_file = Path(frames_uri).parent / "media_hashes.jsonl"
    index_file.unlink(missing_ok=True)

    t0 = time.perf_counter()
    index = hash_index_for(frames_uri)
    for path in media:
        content_hash(path, index=index)
    first = time.perf_counter() - t0

    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    lookups = [float(subprocess.run([sys.executable, "-c", LOOKUP, frames_uri, *media], env=env, check=True,
                                    capture_output=True, text=True).stdout) for _ in range(args.lookups)]

    from evr1.cache import keys

    keys._memo.clear()
    t0 = time.perf_counter()
    try:
        content_hash(media[0], timeout_s=args.timeout_s)
        stopped = None
    except HashTimeout:
        stopped = time.perf_counter() - t0
    if args.workdir is None:
        shutil.rmtree(work, ignore_errors=True)
    print(json.dumps({
        "smoke": args.smoke, "files": args.files, "mib_each": args.mb,
        "first_hash_s": round(first, 3), "first_hash_mib_per_s": round(args.files * args.mb / first, 1),
        "index_lookup_fresh_process_s": round(min(lookups), 4),
        "speedup": round(first / min(lookups), 1),
        f"hash_with_timeout_{args.timeout_s:g}s_stopped_after_s": round(stopped, 3) if stopped is not None else None,
    }))


if __name__ == "__main__":
    main()
