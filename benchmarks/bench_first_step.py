"""Time to the first training step, phase by phase, of two source trees side by side.

    .venv/bin/python benchmarks/bench_first_step.py --old /tmp/wt-old --new . [--pairs 3]

Each tree is a checkout of evr1 (e.g. `git worktree add /tmp/wt-old <commit>`); both run with this
venv's packages, the tree put first on PYTHONPATH (it wins over the editable install, in the flow's
process and in Ray's workers alike). The runs alternate old, new, old, … so a machine whose load
changes loads both alike. Each is `evr1 run conf/tiny.yaml` with one warm-up and one RL step, in a
fresh run folder (a new MLflow store, nothing cached), `--timings`; the phases are read from its
`timings.json`. Prints one JSON line: each variant's times to the first step and the phases, and
`speedup` (median old / median new). docs/performance.md has the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OVERRIDES = ["run.name=t", "trainer.steps=1", "trainer.warmup_sft_steps=1", "eval.max_new_tokens=4"]


SMOKE = ["data.synth.n=8", "data.synth.heldout=2", "eval.enabled=false"]  # the same phases, less data, no eval


def first_step(tree: Path, root: Path, extra: list[str] = []) -> dict[str, float]:
    """One `evr1 run` of `tree` in `root`: its phases up to the first training step, in seconds."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(tree), os.environ.get("PYTHONPATH")) if p)}
    cmd = [str(Path(sys.executable).parent / "evr1"), "run", str(tree / "conf" / "tiny.yaml"), f"run.root={root}",
           *OVERRIDES, *extra, "--timings"]
    log = root / "evr1-run.log"  # kept out of the figures' way, read back when the run fails
    with log.open("w") as out:
        proc = subprocess.run(cmd, cwd=root, env=env, check=False, stdout=out, stderr=subprocess.STDOUT)
    if proc.returncode != 0:
        tail = log.read_text(errors="replace")[-8000:]
        raise RuntimeError(f"`{' '.join(cmd)}` exited {proc.returncode}; the end of its output:\n{tail}")
    spans = json.loads((root / "t" / "timings.json").read_text())["spans"]
    t0 = spans[0]["start"]
    first = next(s for s in spans if s["name"].startswith("first GRPO step"))
    out = {"to_first_step_s": round(first["start"] - t0, 1)}
    for s in spans:
        if s["depth"] == 0 or "Ray" in s["name"]:
            out[s["name"].split(" (")[0]] = round(s["seconds"], 1)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--old", type=Path, help="the baseline tree (required but with --smoke)")
    parser.add_argument("--new", type=Path, default=ROOT, help="the tree measured against it (default: this one)")
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--smoke", action="store_true", help="one run of --new alone, as both variants (CI: the path runs)")
    args = parser.parse_args()
    if args.old is None and not args.smoke:
        parser.error("--old is required (a checkout of the baseline commit)")
    runs: dict[str, list[dict]] = {"old": [], "new": []}
    with tempfile.TemporaryDirectory(prefix="evr1-first-step-") as tmp:
        for i in range(1 if args.smoke else args.pairs):
            for label in ("new",) if args.smoke else ("old", "new"):
                root = Path(tmp) / f"{label}{i}"
                root.mkdir()
                runs[label].append(first_step(getattr(args, label).resolve(), root, SMOKE if args.smoke else []))
                print(f"[bench_first_step] {label} {i + 1}: {runs[label][-1]['to_first_step_s']} s", file=sys.stderr)
        if args.smoke:
            runs["old"] = runs["new"]
    median = {k: statistics.median(r["to_first_step_s"] for r in v) for k, v in runs.items()}
    print(json.dumps({"old": runs["old"], "new": runs["new"], "median_old_s": median["old"],
                      "median_new_s": median["new"], "speedup": round(median["old"] / median["new"], 3)}))


if __name__ == "__main__":
    main()
