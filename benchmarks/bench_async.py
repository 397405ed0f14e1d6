"""Asynchronous rollouts side by side (issue 32): synchronous against one-step-off and bounded
staleness, on the real trainer (Ray, one FSDP2 rank, one separate HF rollout worker, CPU).

Generation and training are pinned to separate cores (`trainer.cpus`, `rollout.cpus`: the rank on
core 0, the rollout worker on core 1), so an overlap is a real one. Each mode runs the same
`--steps` GRPO steps; the first `--warmup` steps are left out of the means. One JSON line per mode,
then one summary line with `speedup_one_step_off`, `speedup_bounded`, `staleness_max`,
`trainer_idle_frac` and `rollout_idle_frac` (of the one-step-off run), and a phase model:

    synchronous step ≈ G + T + S,   overlapped step ≈ max(G, T) + S

from the synchronous run's generate (G), train (T: log-probs, advantages, update) and sync (S)
times: the speed-up overlap can give at best, and the share of devices to give generation so that
G and T balance (`suggested_rollout_share` = G / (G + T) of the devices, at equal per-device speed).

Run:  PYTHONPATH=. .venv/bin/python benchmarks/bench_async.py [--steps 8] [--max-new-tokens 48]

`--part learning`: does learning survive the staleness? The learning test's task (tests/train/
test_learning.py: a reward for the share of the letter "e", 2 ranks, 20 steps) synchronous against
one-step-off (corrected) over `--seeds` run seeds: the mean reward of the last 5 steps per run, and
each mode's mean and spread. Prints one JSON line per run and a summary line.

`--smoke`: 3 steps, 2 prompts, n 2, 4 new tokens: CI runs it (tests/benchmarks) so the script cannot
rot; its figures mean nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MODES = {"synchronous": [], "one_step_off": ["trainer.mode=one_step_off", "rollout.correction.enabled=true"],
         "bounded": ["trainer.mode=bounded", "trainer.max_staleness=2", "rollout.correction.enabled=true"]}


def _mean(history: list[dict], key: str, skip: int) -> float:
    values = [h[key] for h in history[skip:] if key in h]
    return float(statistics.mean(values)) if values else 0.0


def learning(args) -> None:
    import numpy as np
    import ray

    from evr1.config import load_config
    from tests.train.conftest import letter_density_data, letter_density_overrides, train_through_stages

    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="bench-async-learning-"))
    data = letter_density_data(workdir)
    finals: dict[str, list[float]] = {"synchronous": [], "one_step_off": []}
    steps = 4 if args.smoke else 20
    for seed in range(args.seeds):
        for mode in finals:
            extra = ["rollout.placement=separate"] + (
                ["trainer.mode=one_step_off", "rollout.correction.enabled=true"] if mode != "synchronous" else [])
            name = f"{mode}-{seed}"
            cfg = load_config(ROOT / "conf/tiny.yaml", [
                f"run.root={workdir}", f"run.name={name}", "tracking.enabled=false", "cache.workers=0",
                *letter_density_overrides(data), "reward.accuracy_weight=1.0", "reward.format_weight=0.0",
                "model.tiny.family=qwen2_5_vl", f"trainer.steps={steps}", "trainer.warmup_sft_steps=0",
                "trainer.prompts_per_step=4", "rollout.n=4", "trainer.world_size=2", "trainer.micro_batch_size=8",
                "rollout.max_new_tokens=12", "trainer.lr=0.01", "algorithm.use_kl_loss=false", "trainer.save_every=0",
                f"run.seed={seed}", *extra])
            result = train_through_stages(cfg, workdir / name / "ckpt")
            if ray.is_initialized():
                ray.shutdown()
            rewards = [h["reward/overall"] for h in result.history]
            finals[mode].append(float(np.mean(rewards[-5:])))
            print(json.dumps({"mode": mode, "seed": seed, "first5": float(np.mean(rewards[:5])),
                              "last5": finals[mode][-1]}), flush=True)
    print(json.dumps({"summary": True, "smoke": args.smoke, "seeds": args.seeds,
                      **{f"{m}_last5_mean": float(np.mean(v)) for m, v in finals.items()},
                      **{f"{m}_last5_std": float(np.std(v, ddof=1)) if len(v) > 1 else 0.0 for m, v in finals.items()}}),
          flush=True)


def main() -> None:
    import ray

    from evr1 import pipeline
    from evr1.config import load_config
    from evr1.data.ingest import read_samples
    from evr1.train.trainer import train

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--prompts", type=int, default=4)
    ap.add_argument("--n", type=int, default=4)
    ap.add_argument("--max-new-tokens", type=int, default=48)
    ap.add_argument("--workdir", type=Path, default=None)
    ap.add_argument("--smoke", action="store_true")
    ap.add_argument("--part", choices=("speed", "learning"), default="speed")
    ap.add_argument("--seeds", type=int, default=3)
    args = ap.parse_args()
    if args.part == "learning":
        return learning(args)
    if args.smoke:
        args.steps, args.warmup, args.prompts, args.n, args.max_new_tokens = 3, 1, 2, 2, 4
    cores = sorted(os.sched_getaffinity(0))
    pin = [f"trainer.cpus=[{cores[0]}]", f"rollout.cpus=[{cores[-1]}]"] if len(cores) > 1 else []
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="bench-async-"))
    base = [f"run.root={workdir}", "run.name=bench", "tracking.enabled=false", "eval.enabled=false",
            "model.tiny.family=qwen2_5_vl", f"data.synth.n={max(args.prompts * args.steps, 4)}", "data.synth.heldout=1",
            "trainer.warmup_sft_steps=0", f"trainer.steps={args.steps}", f"trainer.prompts_per_step={args.prompts}",
            "trainer.world_size=1", f"rollout.n={args.n}", f"rollout.max_new_tokens={args.max_new_tokens}",
            "trainer.save_every=0", "trainer.val_every=0", "trainer.log_rollouts_every=0",
            "rollout.placement=separate", *pin]
    cfg = load_config(ROOT / "conf/tiny.yaml", base)
    samples = pipeline.stage_ingest(cfg)
    model = pipeline.stage_model(cfg)
    frames = pipeline.stage_cache(cfg, samples, model)
    rows = {}
    for mode, overrides in MODES.items():
        c = load_config(ROOT / "conf/tiny.yaml", [*base, *overrides])
        result = train(c, samples=read_samples(samples.uri, split="train"), frames_uri=frames.uri,
                       model_dir=Path(model.uri), out_dir=workdir / mode)
        if ray.is_initialized():
            ray.shutdown()
        h, k = result.history, args.warmup
        step_s = _mean(h, "time/step_s", k) + _mean(h, "perf/trainer_wait_s", k)  # the wall time per step
        tokens = _mean(h, "perf/tokens", k)
        rows[mode] = {
            "mode": mode, "step_s": step_s, "tokens_per_s": tokens / step_s if step_s else 0.0,
            "generate_s": _mean(h, "time/collect_s" if mode != "synchronous" else "time/rollout_s", k),
            "train_s": sum(_mean(h, f"time/{p}_s", k) for p in ("log_probs", "advantage", "update")),
            "sync_s": _mean(h, "time/sync_s", k),
            "staleness_max": max((x.get("rollout/staleness", 0.0) for x in h), default=0.0),
            "trainer_idle_frac": _mean(h, "perf/trainer_idle_frac", k),
            "rollout_idle_frac": _mean(h, "perf/rollout_idle_frac_async", k),
            "is_weight_mean": _mean(h, "rollout/is_weight_mean", k),
            "logprob_gap_max": max((x.get("rollout/logprob_gap_max", 0.0) for x in h), default=0.0),
        }
        print(json.dumps(rows[mode]), flush=True)
    sync, off, bounded = rows["synchronous"], rows["one_step_off"], rows["bounded"]
    g, t, s = sync["generate_s"], sync["train_s"], sync["sync_s"]
    summary = {
        "summary": True, "smoke": args.smoke, "cores": len(cores), "pinned": bool(pin),
        "speedup_one_step_off": sync["step_s"] / off["step_s"], "speedup_bounded": sync["step_s"] / bounded["step_s"],
        "staleness_max": max(off["staleness_max"], bounded["staleness_max"]),
        "trainer_idle_frac": off["trainer_idle_frac"], "rollout_idle_frac": off["rollout_idle_frac"],
        "predicted_speedup": (g + t + s) / (max(g, t) + s) if g + t else 0.0,
        "suggested_rollout_share": g / (g + t) if g + t else 0.0,
    }
    print(json.dumps(summary), flush=True)


if __name__ == "__main__":
    main()
