"""Rollout placement side by side (issue 31): an engine in every policy rank (colocated) against one
rollout worker beside them (separate), on the real trainer (Ray, FSDP2 ranks, HF engines on the CPU).

For each model size, the same GRPO run (`--steps` steps of `--prompts` prompts × `--n` samples on
`--world-size` ranks, seeds from the data, so both modes generate the same tokens) in each mode; the
first step is a warm-up, the others are averaged. One JSON line per (size, mode):

- `sync_s` and its split `sync_gather_s` / `sync_load_s` / `sync_reset_s` / `sync_wake_s` (a colocated
  sync is max over ranks; a separate one the wall time of rank 0 → bucket queue → worker), `sleep_s`;
- `sync_bytes` (bytes into each engine, in its dtype: fp32 on the CPU), `model_bf16_bytes` (the model in
  bf16, what a GPU sync moves), `previous_fp32_bytes` (the previous path: a whole fp32 state dict on
  rank 0's host, then through Ray's object store, then a copy in the worker);
- `gen_tokens_per_s` (all engines together, over the slowest engine's generate time),
  `gen_tokens_per_s_per_engine`, `idle_frac` (Σ(max − tᵢ)/(engines · max) over generate times);
- `step_s`, and `peak_tree_rss_gb`: the largest sum of resident memory over the driver and every
  process under it (Ray's raylet, its workers, the actors), sampled every 0.2 s.

Run:  PYTHONPATH=. .venv/bin/python benchmarks/bench_rollout_scale.py [--sizes tiny,medium] [--steps 3]

`--smoke` runs one size (tiny), 2 steps, 2 prompts, n 2, 2 new tokens: CI runs it (tests/benchmarks) so
the script cannot rot; its figures mean nothing. These are CPU figures; a GPU run (vLLM colocated,
sleep level 2) is a separate measurement (docs/performance.md says which exist).
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import threading
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]
SIZES = {
    "tiny": {},
    # about 0.2 B parameters: 16 layers of hidden 1024 (the vision tower stays small)
    "medium": {"hidden_size": 1024, "intermediate_size": 2816, "num_hidden_layers": 16, "num_attention_heads": 16,
               "num_key_value_heads": 4},
}
MODES = ("separate", "colocated")


class TreePeak:
    """The peak of Σ RSS over this process and all its descendants, sampled in a thread."""

    def __init__(self, every_s: float = 0.2):
        self.every_s, self.peak, self._stop = every_s, 0, threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _sample(self) -> int:
        me = psutil.Process()
        total = 0
        for p in [me, *me.children(recursive=True)]:
            try:
                total += p.memory_info().rss
            except psutil.Error:
                pass
        return total

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, self._sample())
            self._stop.wait(self.every_s)

    def __enter__(self) -> "TreePeak":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()


def _mean(history: list[dict], key: str) -> float:
    values = [h[key] for h in history[1:] or history if key in h]
    return float(statistics.mean(values)) if values else 0.0


def run_size(size: str, args, workdir: Path) -> list[dict]:
    import ray

    from evr1 import pipeline
    from evr1.config import load_config
    from evr1.data.ingest import read_samples
    from evr1.train.trainer import train

    sizes = json.dumps(SIZES[size]).replace('"', "")
    base = [f"run.root={workdir / size}", "run.name=bench", "tracking.enabled=false", "eval.enabled=false",
            "model.tiny.family=qwen2_5_vl", f"model.tiny.sizes={sizes}",
            f"data.synth.n={max(args.prompts * args.steps, 4)}", "data.synth.heldout=1",
            "trainer.warmup_sft_steps=0", f"trainer.steps={args.steps}", f"trainer.prompts_per_step={args.prompts}",
            f"trainer.world_size={args.world_size}", f"rollout.n={args.n}",
            f"rollout.max_new_tokens={args.max_new_tokens}", "trainer.save_every=0", "trainer.val_every=0",
            "algorithm.use_kl_loss=false", "trainer.log_rollouts_every=0"]
    cfg = load_config(ROOT / "conf/tiny.yaml", base)
    samples = pipeline.stage_ingest(cfg)
    model = pipeline.stage_model(cfg)
    frames = pipeline.stage_cache(cfg, samples, model)
    params = _param_count(Path(model.uri))
    out = []
    for mode in MODES:
        c = load_config(ROOT / "conf/tiny.yaml", [*base, f"rollout.placement={mode}"])
        with TreePeak() as peak:
            result = train(c, samples=read_samples(samples.uri, split="train"), frames_uri=frames.uri,
                           model_dir=Path(model.uri), out_dir=workdir / size / mode)
        if ray.is_initialized():
            ray.shutdown()  # each mode starts its own Ray: the process tree is that mode's alone
        h = result.history
        engines = _mean(h, "perf/rollout_engines")
        gen = _mean(h, "perf/gen_tokens_per_s")
        out.append({
            "size": size, "mode": mode, "params": params, "world_size": args.world_size, "engines": engines,
            "sync_s": _mean(h, "time/sync_s"),
            **{f"sync_{k}": _mean(h, f"perf/sync_{k}") for k in ("gather_s", "load_s", "reset_s", "wake_s")},
            "sleep_s": _mean(h, "perf/engine_sleep_s"),
            "sync_bytes": _mean(h, "perf/sync_bytes"), "sync_buckets": _mean(h, "perf/sync_buckets"),
            "model_bf16_bytes": 2 * params, "previous_fp32_bytes": 4 * params,
            "gen_tokens_per_s": gen, "gen_tokens_per_s_per_engine": gen / max(engines, 1.0),
            "idle_frac": _mean(h, "perf/rollout_idle_frac"), "rollout_s": _mean(h, "time/rollout_s"),
            "step_s": _mean(h, "time/step_s"), "peak_tree_rss_gb": peak.peak / 2**30,
        })
        print(json.dumps(out[-1]), flush=True)
    return out


def _param_count(model_dir: Path) -> int:
    from safetensors import safe_open

    total = 0
    for path in model_dir.glob("*.safetensors"):
        with safe_open(str(path), framework="pt") as f:
            for name in f.keys():
                n = 1
                for d in f.get_slice(name).get_shape():
                    n *= d
                total += n
    return total


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="tiny,medium")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--prompts", type=int, default=4)
    ap.add_argument("--n", type=int, default=4)
    ap.add_argument("--max-new-tokens", type=int, default=16)
    ap.add_argument("--world-size", type=int, default=2)
    ap.add_argument("--workdir", type=Path, default=None)
    ap.add_argument("--smoke", action="store_true")
    args = ap.parse_args()
    if args.smoke:
        args.sizes, args.steps, args.prompts, args.n, args.max_new_tokens = "tiny", 2, 2, 2, 2
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="bench-rollout-"))
    rows = []
    for size in args.sizes.split(","):
        rows += run_size(size, args, workdir)
    print("\n| size | mode | engines | sync s | sync bytes | bf16 model | gen tok/s | idle | step s | tree RSS GB |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        print(f"| {r['size']} | {r['mode']} | {r['engines']:.0f} | {r['sync_s']:.3f} | {r['sync_bytes'] / 1e6:.1f} MB | "
              f"{r['model_bf16_bytes'] / 1e6:.1f} MB | {r['gen_tokens_per_s']:.1f} | {r['idle_frac']:.2f} | "
              f"{r['step_s']:.2f} | {r['peak_tree_rss_gb']:.2f} |")


if __name__ == "__main__":
    main()
