"""Learning, measured: RL alone from chance on four video question families, over seeds, on a test split.

    .venv/bin/python -m research.learning.run                        # seeds 0 1 2, RL alone (~30 min each on 2 cores)
    .venv/bin/python -m research.learning.run --seeds 0 --steps 300  # one shorter run
    .venv/bin/python -m research.learning.run --offline              # also RL with demonstrations (reported apart)
    .venv/bin/python -m research.learning.run --skip-runs            # re-read finished runs, redraw the plot
    .venv/bin/python -m research.learning.run --root runs/i34f --name 's{seed}-450-lr3e-4' --skip-runs  # forks

Each seed runs `evr1 run conf/learning.yaml run.seed=S model.tiny.seed=S` through the real pipeline
(ingest, frame cache, Ray, FSDP2 on 2 ranks, merge, eval): a different random model and a different
rollout stream per seed, the same data. Configs are chosen on the held-out split (validated during
training); the figures this prints come from the test split (`data.synth.test`), which nothing reads
until the merged model is scored on it once, at the end (the `test` benchmark).

It prints one JSON line: `seeds`, `test_accuracy_mean/min/max`, `test_accuracy_by_family_mean/min`,
`test_accuracy_by_seed`, `heldout_accuracy_before_rl` (mean over seeds, and per seed),
`heldout_accuracy_at` (mean/min/max at steps 300/450/600 where a run reached them), the answer floors
per family on the test split (`chance`, `constant`: what a collapsed policy scores), `train_wall_s`
(the train stage, warm-up included; across a resume it spans the gap too), `rl_steps_s` (the RL steps'
own time, summed) and `run_wall_s` (the whole `evr1 run`, start-up and eval included), means over seeds; with `--offline`, the demonstration run's figures under `offline` (never mixed in).
Also a plot of the runs (`--plot`; by default `<root>/learning.png`, beside them, so that an exploratory
run does not replace the page's figure: pass `--plot docs/learning.png` to redraw it) and the oracle's
accuracy on every generated item. A benchmark, not a CI test
(tests/train/test_learning_video.py is the short one).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from research.learning import report as learning_report

ROOT = Path(__file__).resolve().parents[2]
CONF = ROOT / "conf" / "learning.yaml"
OFFLINE = ["data.offline_key=trajectory", "algorithm.offline_ratio=1.0"]  # each sample's trajectory as its n-th response
FIXED_STEPS = (300, 450, 600)
WALL_FILE = "run_wall_s.json"  # beside the run folder's other files: `--skip-runs` reads it back


def run(name: str, root: Path, overrides: list[str], conf: Path = CONF) -> Path:
    """One `evr1 run` of `conf`; its wall time is kept in the run folder."""
    cmd = [str(ROOT / ".venv" / "bin" / "evr1"), "run", str(conf), f"run.root={root}", f"run.name={name}",
           "trainer.resume=false", *overrides]
    print(f"[research.learning.run] {' '.join(cmd)}", file=sys.stderr, flush=True)
    t0 = time.perf_counter()
    with open(root / f"{name}.log", "w") as log:
        subprocess.run(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, check=True, env={**os.environ})
    wall = time.perf_counter() - t0
    (root / name / WALL_FILE).write_text(json.dumps({"run_wall_s": wall, "overrides": overrides}))
    print(f"[research.learning.run] {name}: {wall:.0f} s", file=sys.stderr, flush=True)
    return root / name


def oracle_accuracy(root: Path, name: str, conf: Path = CONF) -> dict[str, float]:
    """The oracle's accuracy per family over every generated item (all splits), from the frames the
    run's cache holds: the same sampled, resized frames the model receives."""
    from evr1 import pipeline
    from evr1.cache import FrameReader
    from evr1.config import load_config
    from evr1.data.synth_tasks import oracle
    from evr1.models import load_adapter

    cfg = load_config(conf, [f"run.root={root}", f"run.name={name}"])
    synth = pipeline.run_paths(cfg)["data"] / "synth"
    model_dir = pipeline.stage_model(cfg).uri  # the run's model folder (already built)
    params = cfg.cache.frame_params(load_adapter(model_dir).family.factor)
    reader = FrameReader(pipeline.run_frames_uri(cfg), params, mode="cache-only", data_root=str(synth))
    right: dict[str, list[bool]] = {}
    for split in ("train", "heldout", "test"):
        path = synth / f"{split}.jsonl"
        if not path.exists():
            continue
        for line in path.read_text().splitlines():
            rec = json.loads(line)
            clip = reader.video(rec["videos"][0])
            times = np.asarray(clip.frame_indices) / clip.fps
            right.setdefault(rec["synth_kind"], []).append(oracle(rec["synth_kind"], clip.frames, times) == rec["answer"])
    return {kind: float(np.mean(v)) for kind, v in sorted(right.items())} | {"items": float(sum(map(len, right.values())))}


def run_figures(run_dir: Path, target: float) -> dict:
    """One run's figures: the held-out curve's (from MLflow), the test split's, the wall times."""
    summary = learning_report.summary(run_dir, target)
    wall = run_dir / WALL_FILE
    return {**summary, "test": learning_report.test_scores(run_dir),
            "heldout_at": learning_report.at_steps(run_dir, FIXED_STEPS),
            "run_wall_s": round(json.loads(wall.read_text())["run_wall_s"], 1) if wall.exists() else None}


def _stats(values: list[float]) -> dict[str, float]:
    return {"mean": round(float(np.mean(values)), 4), "min": round(float(np.min(values)), 4),
            "max": round(float(np.max(values)), 4)}


def aggregate(per_seed: dict[int, dict]) -> dict:
    """The JSON line's seed-level figures: means and ranges over seeds, nothing else mixed in."""
    runs = list(per_seed.values())
    families = sorted(runs[0]["test"]["by_family"])
    at: dict[str, dict[str, dict[str, float]]] = {}
    for step in FIXED_STEPS:
        for name in runs[0]["heldout_at"]:
            values = [r["heldout_at"].get(name, {}).get(step) for r in runs]
            if all(v is not None for v in values):
                at.setdefault(str(step), {})[name] = _stats(values)
    before = [r["heldout_accuracy_before_rl"] for r in runs]
    walls = [r["run_wall_s"] for r in runs if r["run_wall_s"] is not None]
    return {
        "seeds": sorted(per_seed),
        "test_accuracy_mean": _stats([r["test"]["accuracy"] for r in runs])["mean"],
        "test_accuracy_min": _stats([r["test"]["accuracy"] for r in runs])["min"],
        "test_accuracy_max": _stats([r["test"]["accuracy"] for r in runs])["max"],
        "test_accuracy_by_family_mean": {f: _stats([r["test"]["by_family"][f] for r in runs])["mean"] for f in families},
        "test_accuracy_by_family_min": {f: _stats([r["test"]["by_family"][f] for r in runs])["min"] for f in families},
        "test_accuracy_by_seed": {str(s): round(r["test"]["accuracy"], 4) for s, r in per_seed.items()},
        "test_items_by_family": runs[0]["test"]["items_by_family"],
        "heldout_accuracy_before_rl": round(float(np.mean(before)), 4) if None not in before else None,
        "heldout_accuracy_before_rl_by_seed": {str(s): r["heldout_accuracy_before_rl"] for s, r in per_seed.items()},
        "heldout_accuracy_at": at,
        "heldout_accuracy_final_mean": _stats([r["val_accuracy_final"] for r in runs])["mean"],
        "steps": [r["steps"] for r in runs],
        "train_wall_s": round(float(np.mean([r["train_wall_s"] for r in runs])), 1),
        "rl_steps_s": round(float(np.mean([r["rl_steps_s"] for r in runs])), 1),
        "run_wall_s": round(float(np.mean(walls)), 1) if walls else None,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--root", type=Path, default=ROOT / "runs", help="run.root for every run")
    parser.add_argument("--config", type=Path, default=CONF, help="the config every run starts from")
    parser.add_argument("--no-oracle", action="store_true", help="skip the oracle check (a set without synth kinds)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--steps", type=int, default=None, help="trainer.steps (default: conf/learning.yaml's)")
    parser.add_argument("--set", dest="extra", action="append", default=[], metavar="KEY=VALUE",
                        help="one more override for every run (repeat)")
    parser.add_argument("--offline", action="store_true", help="also RL with demonstrations (seed 0), reported apart")
    parser.add_argument("--skip-runs", action="store_true", help="only read back finished runs")
    parser.add_argument("--name", default="learning-s{seed}",
                        help="each seed's run folder name under --root (e.g. s{seed}-450-lr3e-4 for forks, "
                             "read with their origins)")
    parser.add_argument("--plot", type=Path, default=None,
                        help="where the plot goes (default: <root>/learning.png; docs/learning.png for the page's)")
    parser.add_argument("--target", type=float, default=0.8)
    args = parser.parse_args()
    args.root.mkdir(parents=True, exist_ok=True)
    common = [*([f"trainer.steps={args.steps}"] if args.steps else []), *args.extra]
    dirs: dict[str, Path] = {}
    for seed in args.seeds:
        name = args.name.format(seed=seed)
        overrides = [f"run.seed={seed}", f"model.tiny.seed={seed}", *common]
        dirs[name] = args.root / name if args.skip_runs else run(name, args.root, overrides, args.config)
    if args.offline:
        dirs["learning-offline"] = (args.root / "learning-offline" if args.skip_runs
                                    else run("learning-offline", args.root, ["run.seed=0", "model.tiny.seed=0", *OFFLINE, *common],
                                             args.config))
    per_seed = {seed: run_figures(dirs[args.name.format(seed=seed)], args.target) for seed in args.seeds}
    first = dirs[args.name.format(seed=args.seeds[0])]
    line = {**aggregate(per_seed),
            "answer_floors_test": learning_report.answer_floors(learning_report.test_rows(first)),
            "per_seed": {str(s): {k: r[k] for k in ("test", "heldout_at", "heldout_accuracy_before_rl_by_family",
                                                    "steps_to_target", "train_wall_s", "rl_steps_s", "run_wall_s")}
                         for s, r in per_seed.items()},
            "oracle_accuracy": None if args.no_oracle else oracle_accuracy(args.root, first.name, args.config)}
    if args.offline:
        line["offline"] = run_figures(dirs["learning-offline"], args.target)  # RL with demonstrations: apart
    plot = args.plot or args.root / "learning.png"
    learning_report.plot(dirs, plot, args.target)
    line["plot"] = str(plot)
    print(json.dumps(line))


if __name__ == "__main__":
    main()
