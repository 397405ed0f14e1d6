"""Start-up imports of a Ray actor (a policy rank and a rollout worker): what each new process pays
before it can load a model, with transformers' unused scikit-learn import skipped (evr1/models/lean_import.py)
and as before (scikit-learn imported by `transformers.generation.candidate_generator` first).

Each repeat is a fresh Python process, as Ray starts one per actor; the two ways alternate, so a busy
moment of the machine falls on both. The figure is the median wall time of the imports in the child.

Run:  PYTHONPATH=. .venv/bin/python benchmarks/bench_imports.py [--repeats 5]
Prints one JSON line. `--smoke`: one repeat of each, seconds long: CI runs it (tests/benchmarks) so the
script cannot rot.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# What a policy rank and a rollout worker import before their first call (evr1/train/actor_group.py).
ACTOR = """
import sys, time
t0 = time.perf_counter()
if sys.argv[1] == "before":
    import transformers.generation.candidate_generator  # scikit-learn first: the path before lean_import
import evr1.train.workers.policy, evr1.train.workers.rollout
print(time.perf_counter() - t0, "sklearn" in sys.modules)
"""


def _child(way: str) -> tuple[float, bool]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    out = subprocess.run([sys.executable, "-c", ACTOR, way], check=True, capture_output=True, text=True, env=env,
                         cwd=ROOT).stdout.split()
    return float(out[0]), out[1] == "True"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5, help="fresh processes per way (alternating)")
    ap.add_argument("--smoke", action="store_true", help="one repeat of each way: seconds")
    args = ap.parse_args()
    if args.smoke:
        args.repeats = 1
    if not args.smoke:
        _child("lean")  # warms the page cache for both ways
    times: dict[str, list[float]] = {"lean": [], "before": []}
    sklearn: dict[str, bool] = {}
    for _ in range(args.repeats):
        for way in times:
            seconds, loaded = _child(way)
            times[way].append(seconds)
            sklearn[way] = loaded
    lean, before = statistics.median(times["lean"]), statistics.median(times["before"])
    print(json.dumps({"bench": "actor_imports", "smoke": args.smoke, "repeats": args.repeats,
                      "lean_s": round(lean, 3), "before_s": round(before, 3), "saved_s": round(before - lean, 3),
                      "speedup": round(before / lean, 3), "sklearn_loaded": sklearn,
                      "all_s": {k: [round(v, 3) for v in vs] for k, vs in times.items()}}))


if __name__ == "__main__":
    main()
