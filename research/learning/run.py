"""Learning, shown: RL from chance to the target held-out accuracy, online and with offline trajectories.

    .venv/bin/python -m research.learning.run                 # both runs, then the plot (~1 h on 2 cores)
    .venv/bin/python -m research.learning.run --skip-runs     # re-read finished runs, redraw the plot

Runs `evr1 run conf/learning.yaml` twice through the real pipeline (ingest, frame cache, Ray, FSDP2
on 2 ranks, merge, eval): plain GRPO, then the same with each sample's correct reasoning-and-answer
trajectory as its n-th response (mixed offline-online). Then it checks the oracle on every generated
item (answers read from the cached frames the model is shown), reads both runs back from MLflow
(research/learning/report.py), draws docs/learning.png and prints one JSON line:
heldout_accuracy_before_rl, heldout_accuracy(_by_family), steps_to_80, steps_to_80_offline,
train_wall_s, … This is a benchmark, not a CI test (tests/train/test_learning_video.py is the short one).
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
RUNS = {  # label → extra overrides of conf/learning.yaml
    "online": [],
    "offline": ["data.offline_key=trajectory", "algorithm.offline_ratio=1.0"],
}


def run(label: str, root: Path, overrides: list[str]) -> Path:
    name = f"learning-{label}"
    cmd = [str(ROOT / ".venv" / "bin" / "evr1"), "run", str(CONF), f"run.root={root}", f"run.name={name}",
           "trainer.resume=false", *overrides]
    print(f"[research.learning.run] {' '.join(cmd)}", file=sys.stderr, flush=True)
    t0 = time.perf_counter()
    with open(root / f"{name}.log", "w") as log:
        subprocess.run(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, check=True, env={**os.environ})
    print(f"[research.learning.run] {label}: {time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)
    return root / name


def oracle_accuracy(root: Path, name: str) -> dict[str, float]:
    """The oracle's accuracy per family over every generated item (both splits), from the frames the
    run's cache holds: the same sampled, resized frames the model receives."""
    from evr1 import pipeline
    from evr1.cache import FrameReader
    from evr1.config import load_config
    from evr1.data.synth_tasks import oracle
    from evr1.models import load_adapter

    cfg = load_config(CONF, [f"run.root={root}", f"run.name={name}"])
    synth = pipeline.run_paths(cfg)["data"] / "synth"
    model_dir = pipeline.stage_model(cfg).uri  # the run's model folder (already built)
    params = cfg.cache.frame_params(load_adapter(model_dir).family.factor)
    reader = FrameReader(pipeline.run_frames_uri(cfg), params, mode="cache-only", data_root=str(synth))
    right: dict[str, list[bool]] = {}
    for split in ("train", "heldout"):
        for line in (synth / f"{split}.jsonl").read_text().splitlines():
            rec = json.loads(line)
            clip = reader.video(rec["videos"][0])
            times = np.asarray(clip.frame_indices) / clip.fps
            right.setdefault(rec["synth_kind"], []).append(oracle(rec["synth_kind"], clip.frames, times) == rec["answer"])
    return {kind: float(np.mean(v)) for kind, v in sorted(right.items())} | {"items": float(sum(map(len, right.values())))}


def heldout_eval(run_dir: Path) -> dict[str, float]:
    """The eval stage's held-out scores of the merged checkpoint, per problem type."""
    metrics = learning_report.stage_run(run_dir, "eval-heldout").data.metrics
    return {k: v for k, v in metrics.items() if k.startswith("heldout/") and k.endswith("score")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--root", type=Path, default=ROOT / "runs", help="run.root for both runs")
    parser.add_argument("--skip-runs", action="store_true", help="only read back finished runs")
    parser.add_argument("--plot", type=Path, default=ROOT / "docs" / "learning.png")
    parser.add_argument("--target", type=float, default=0.8)
    args = parser.parse_args()
    args.root.mkdir(parents=True, exist_ok=True)
    dirs = {label: (args.root / f"learning-{label}" if args.skip_runs else run(label, args.root, extra))
            for label, extra in RUNS.items()}
    online, offline = (learning_report.summary(dirs[k], args.target) for k in ("online", "offline"))
    learning_report.plot(dirs, args.plot, args.target)
    print(json.dumps({
        "heldout_accuracy_before_rl": online["heldout_accuracy_before_rl"],
        "heldout_accuracy_before_rl_by_family": online["heldout_accuracy_before_rl_by_family"],
        "heldout_accuracy": online["val_accuracy_final"],
        "heldout_accuracy_by_family": online["val_accuracy_final_by_family"],
        "heldout_eval_merged": heldout_eval(dirs["online"]),
        "steps_to_80": online["steps_to_target"], "seconds_to_80": online["seconds_to_target"],
        "steps_to_80_offline": offline["steps_to_target"], "seconds_to_80_offline": offline["seconds_to_target"],
        "heldout_accuracy_offline": offline["val_accuracy_final"],
        "heldout_accuracy_by_family_offline": offline["val_accuracy_final_by_family"],
        "steps": online["steps"], "train_wall_s": online["train_wall_s"], "train_wall_s_offline": offline["train_wall_s"],
        "oracle_accuracy": oracle_accuracy(args.root, dirs["online"].name),
        "plot": str(args.plot),
    }))


if __name__ == "__main__":
    main()
