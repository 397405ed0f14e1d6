"""Training at real video sizes (issue 10), measured side by side in one run.

Clips: `--clips` generated 30 s 1280×720 H.264 videos (`bench_cache.make_clip`, reused from
`--workdir`), sampled to 64 frames at 384×672 (nframes=64, factor 32, max 262144 pixels): the
reference project's training budget. Model: a random-init Qwen3-VL with the REAL vision geometry
(patch 16, spatial merge 2, temporal patch 2) and few, narrow layers so it runs on a CPU
(`--size 3b`: a Qwen2.5-VL-3B-shaped config for a GPU). The real trainer (`evr1.train.train`: Ray,
two FSDP2 ranks, the HF rollout engine) runs `--steps` GRPO steps with `--clips` prompts per step:

  1. frames decoded on the fly (cache disabled) vs read from the Lance frame cache, per step;
     then the cache run again with the shared prompt prefix off (`trainer.share_prompt_prefix`):
     time of the log-prob and update passes, and vision-encoder passes per prompt, with and without;
  2. per-step breakdown: data wait, rollout, log-probs, update, weight sync; bytes the driver sends
     per prompt (every actor call, pickled); vision-encoder passes per prompt; peak RSS per process;
  3. the previous path's message for comparison: the eagerly encoded `PromptInputs` (uint8 frames +
     float32 patches) the driver used to send to each destination, pickled;
  4. host memory of model loading: peak RSS of each FSDP2 rank after setup with a ~0.5 GB model
     (`--rss-model`), every rank reading the checkpoint (the previous way) vs rank 0 reading it and the
     others building on the meta device and receiving only their shard.

Run:  PYTHONPATH=. .venv/bin/python benchmarks/bench_train.py [--steps 2] [--clips 2] [--n 4]
Prints a Markdown table, then one JSON line (with each run's peak RSS per rank, `peak_rss_mb_by_run`).
Micro-batches are cut by tokens (`--max-tokens-per-micro-batch`, default 12,288: a whole group with the
shared prefix, one sequence without it), which bounds each rank near 2 GB at the defaults (see `budget`).

`--part packing` (issue 11) measures instead one micro-batch of prompts of mixed lengths (videos of
`--frames` 8, 16, 32 and 64 frames at 384×672: about 1,000 to 8,000 tokens each, random frames: this is the
pass's compute, not the data path) through the same model, forward and backward of the response
log-probs, padded to the longest vs packed end to end (`evr1.models.packed`): tokens per second and
padding share side by side, and the largest log-prob difference between the two.

Run:  PYTHONPATH=. .venv/bin/python benchmarks/bench_train.py --part packing [--reps 3] [--size small --frames 4 8 16 32]

`--smoke` runs both parts through the same code at the smallest sizes (one 1 s clip of 64×112 sampled to
2 frames, 1 step, n 2, 2 new tokens, one rank, a tiny model for figure 4; packing: 2 and 4 frames of 64×96,
1 rep) in a fresh temporary workdir: CI runs it (tests/benchmarks) so the script cannot rot; its figures mean
nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import resource
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_cache import make_clip  # noqa: E402

from evr1 import pipeline  # noqa: E402
from evr1.config import load_config  # noqa: E402
from evr1.data.ingest import read_samples  # noqa: E402
from evr1.models import load_adapter, make_tiny  # noqa: E402
from evr1.train.workers.policy import PolicyWorker  # noqa: E402
from evr1.train.actor_group import worker_options  # noqa: E402
from evr1.train.trainer import train  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SIZES = {
    # Real vision geometry (the family's patch/merge/temporal sizes), narrow and shallow elsewhere.
    "tiny": dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2, vision_depth=2, vision_hidden_size=64, vision_heads=2,
                 max_position_embeddings=32768),
    # A decoder that does real work beside a light tower (for --part packing: padding costs decoder time).
    "small": dict(hidden_size=512, intermediate_size=2048, num_hidden_layers=4, num_attention_heads=4,
                  num_key_value_heads=2, vision_depth=1, vision_hidden_size=64, vision_heads=2,
                  max_position_embeddings=32768),
    "3b": dict(hidden_size=2048, intermediate_size=11008, num_hidden_layers=36, num_attention_heads=16,
               num_key_value_heads=2, vision_depth=32, vision_hidden_size=1280, vision_heads=16,
               max_position_embeddings=32768),
}
FAMILY = {"tiny": "qwen3_vl", "small": "qwen3_vl", "3b": "qwen2_5_vl"}
# For the model-loading memory figure only: large enough (~0.56 GB float32) to stand out of the runtime's RSS.
RSS_SIZES = dict(hidden_size=1024, intermediate_size=4096, num_hidden_layers=8, num_attention_heads=8,
                 num_key_value_heads=4, vision_depth=4, vision_hidden_size=512, vision_heads=8)
# The frame budget of part 1 (the reference's: 64 frames at 384×672 from 720p clips) and --smoke's.
FRAMES = {"nframes": 64, "min_pixels": 3136, "max_pixels": 262144}
SMOKE_FRAMES = {"nframes": 2, "min_pixels": 1024, "max_pixels": 64 * 112}
SMOKE_CLIP_HW = (64, 112)  # part 1's clips under --smoke
SMOKE_PACKING_HW = (64, 96)  # --part packing's random frames under --smoke (384×672 otherwise)
MAX_TOKENS = 12288  # part 1's trainer.max_tokens_per_micro_batch (`budget`)


def _records(clips: list[Path]) -> list[dict]:
    return [{"problem_id": f"bench-{i}", "problem": "<video>\nWhat colour is the moving box?",
             "answer": "A", "problem_type": "multiple choice", "data_type": "video",
             "options": ["A. yellow", "B. red", "C. blue", "D. green"], "videos": [str(p)], "images": []}
            for i, p in enumerate(clips)]


def _run(cfg, rows, frames_uri, model_dir, out_dir) -> list[dict]:
    return train(cfg, samples=rows, frames_uri=frames_uri, model_dir=model_dir, out_dir=out_dir).history


def _mean(history: list[dict], key: str, skip_first: bool = True) -> float:
    rows = history[1:] if skip_first and len(history) > 1 else history
    return statistics.fmean(h[key] for h in rows)


def previous_path_message(model_dir: Path, cfg, rows: list[dict]) -> tuple[int, float, object]:
    """(pickled bytes, seconds, prompt) of one eagerly encoded prompt: what the driver used to build and send."""
    from evr1.cache import FrameReader
    from evr1.train.protocol import ReaderSpec
    from evr1.train.workers.prompt_prep import encode_row

    adapter = load_adapter(model_dir)
    spec = ReaderSpec(None, cfg.cache.frame_params(adapter.family.factor), "decode-only", None, None, False)
    t = time.perf_counter()
    prompt = encode_row(rows[0], adapter, FrameReader(None, spec.params, mode="decode-only"), spec, defer_media=False)
    seconds = time.perf_counter() - t
    return len(pickle.dumps(prompt, protocol=5)), seconds, prompt


def load_rss(model_dir: Path, cfg, *, meta: bool) -> list[float]:
    """Peak RSS (MB) of each rank right after building and sharding the policy (no reference model)."""
    import ray

    options = {**worker_options(cfg), "meta_init": meta, "needs_reference": False}
    actor = ray.remote(num_cpus=0)(PolicyWorker)
    ranks = [actor.remote(r, cfg.trainer.world_size, str(model_dir), options) for r in range(cfg.trainer.world_size)]
    try:
        master = ray.get(ranks[0].endpoint.remote())
        ray.get([r.setup.remote(master) for r in ranks])
        return [round(v, 1) for v in ray.get([r.peak_rss_mb.remote() for r in ranks])]
    finally:
        ray.get([r.shutdown.remote() for r in ranks])
        for r in ranks:
            ray.kill(r)


def trainer_overrides(args, data: Path, model_dir: Path, run_root: Path, dtype: str) -> list[str]:
    """Part 1's config: `conf/tiny.yaml` with these overrides (each run adds its own on top)."""
    frames = SMOKE_FRAMES if args.smoke else FRAMES
    # 64 frames at 384×672 are 8,064 vision tokens, 8,457 with the text: over data.max_prompt_tokens' default
    # (8,192), so every prompt would be skipped. The limit is raised to the model's positions; the trainer
    # caps it at positions − rollout.max_new_tokens (evr1.models.prompt_length.effective_limit).
    return [f"run.root={run_root}", "run.name=bench", "tracking.enabled=false", "cache.workers=2",
            f'data={{"train_files": ["{data}"]}}',
            f"data.max_prompt_tokens={SIZES[args.size]['max_position_embeddings']}",
            f'model={{"path": "{model_dir}", "dtype": "{dtype}"}}',
            f"cache.nframes={frames['nframes']}", f"cache.min_pixels={frames['min_pixels']}",
            f"cache.max_pixels={frames['max_pixels']}", "cache.max_frames=768",
            f"cache.min_frames={min(4, frames['nframes'])}", f"trainer.steps={args.steps}",
            f"trainer.prompts_per_step={args.clips}",
            f"rollout.n={args.n}", f"rollout.max_new_tokens={args.max_new_tokens}", "rollout.batch_size=1",
            f"trainer.world_size={args.world_size}", f"trainer.micro_batch_size={args.n}", "trainer.warmup_sft_steps=0",
            "trainer.save_every=0", "trainer.val_every=0", f"trainer.device={args.device}", "trainer.lr=1e-5",
            "trainer.resume=false",
            # the old log-prob pass runs, as in any update that is not strictly on-policy: what
            # prefix_sharing_logprob_speedup times (auto would skip it here, one mini-batch, one epoch)
            "trainer.skip_old_log_probs=false", *budget(args)]


def budget(args) -> list[str]:
    """Micro-batches cut by tokens (`--max-tokens-per-micro-batch`, 0: `micro_batch_size` = n responses each).

    The default, 12,288, holds a whole group with the shared prefix (8,457 prompt tokens once + 4 × 8
    responses) but one sequence of the unshared runs (8,465 tokens; two would be 16,930). Without it the
    unshared baseline packs n = 4 sequences (33,860 tokens) into one row, and on the CPU sdpa gets that
    row's block-diagonal mask as a T × T tensor: 1.1 GB as bool, 4.6 GB as the float mask sdpa makes of it,
    kept per decoder layer for the backward: about 12.5 GB per rank for this 2-layer model, which Ray's
    memory guard killed on a 24 GiB machine (docs/performance.md). Per sequence it is 0.6 GB, and one
    sequence per micro-batch is also the faster baseline there (the mask makes sdpa compute all T² scores)."""
    tokens = getattr(args, "max_tokens_per_micro_batch", MAX_TOKENS)
    return [f"trainer.max_tokens_per_micro_batch={tokens}"] if tokens else []


def packing(args) -> None:
    """Padded vs padding-free passes over one micro-batch of mixed-length video prompts (see the docstring)."""
    import numpy as np
    import torch

    from evr1.models import load_model, response_log_probs
    from evr1.models.packed import packed_response_log_probs, padding_share
    from random_media import random_clip

    torch.set_num_threads(os.cpu_count() or 2)
    model_dir = args.workdir / f"model-{args.size}"
    if not (model_dir / "config.json").exists():
        make_tiny(FAMILY[args.size], model_dir, seed=0, **SIZES[args.size])
    adapter, model = load_adapter(model_dir), load_model(model_dir).to(args.device)
    rng = np.random.default_rng(0)
    prompts = []
    height, width = SMOKE_PACKING_HW if args.smoke else (384, 672)
    for t in args.frames:
        clip = random_clip(t, height, width, seed=t, fps=2.0, stride=2)
        prompts.append(adapter.encode_prompt("<video>\nWhat colour is the moving box?", videos=[clip], defer_media=True))
    vocab = min(len(adapter.tokenizer), model.config.get_text_config().vocab_size) - 8
    responses = [rng.integers(10, vocab, args.response_tokens).tolist() for _ in prompts]
    batch = adapter.collate(prompts, responses).to(args.device)
    lengths = [len(p) + len(r) for p, r in zip(prompts, responses)]
    results = {}
    for name, fn in (("padded", response_log_probs), ("padding_free", packed_response_log_probs)):
        times = []
        for _ in range(args.reps):
            model.zero_grad(set_to_none=True)
            t0 = time.perf_counter()
            lp, _ = fn(model, batch, temperature=1.0)
            (-lp.sum()).backward()
            times.append(time.perf_counter() - t0)
        results[name] = (statistics.median(times), lp.detach())
    padded_s, packed_s = results["padded"][0], results["padding_free"][0]
    out = {"part": "packing", "smoke": args.smoke, "device": args.device, "frame_hw": [height, width],
           "size": args.size, "family": FAMILY[args.size],
           "sequence_tokens": lengths, "useful_tokens": sum(lengths),
           "padding_share": {"padded": round(padding_share(lengths), 4), "padding_free": 0.0},
           "forward_backward_s": {"padded": round(padded_s, 3), "padding_free": round(packed_s, 3)},
           "tokens_per_s": {"padded": round(sum(lengths) / padded_s, 1), "padding_free": round(sum(lengths) / packed_s, 1)},
           "padding_free_speedup": round(padded_s / packed_s, 3),
           "max_log_prob_diff": float((results["padded"][1] - results["padding_free"][1]).abs().max())}
    print(json.dumps(out))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--part", choices=["trainer", "packing"], default="trainer")
    ap.add_argument("--reps", type=int, default=3, help="--part packing: repetitions (median)")
    ap.add_argument("--response-tokens", type=int, default=64, help="--part packing: tokens per response")
    ap.add_argument("--frames", type=int, nargs="+", default=[8, 16, 32, 64],
                    help="--part packing: frames of each prompt's video (one prompt each)")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--clips", type=int, default=2, help="prompts per step (one clip each)")
    ap.add_argument("--n", type=int, default=4, help="responses per prompt")
    ap.add_argument("--seconds", type=int, default=30)
    ap.add_argument("--max-new-tokens", type=int, default=8)
    ap.add_argument("--world-size", type=int, default=2)
    ap.add_argument("--max-tokens-per-micro-batch", type=int, default=MAX_TOKENS,
                    help="trainer.max_tokens_per_micro_batch of part 1's runs (0: micro-batches of n responses); "
                         "the default keeps memory bounded at 64 frames (see `budget`)")
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("--size", choices=sorted(SIZES), default="tiny")
    ap.add_argument("--dtype", default=None, help="model dtype (default float32 on CPU, bfloat16 on CUDA)")
    ap.add_argument("--rss-model", action=argparse.BooleanOptionalAction, default=True,
                    help="measure model-loading memory with a ~0.5 GB model (figure 4)")
    ap.add_argument("--workdir", type=Path, default=None,
                    help="clips, models and runs (default: $TMPDIR/evr1_bench_train; with --smoke a fresh "
                         "temporary folder)")
    ap.add_argument("--smoke", action="store_true",
                    help="both parts at the smallest sizes (1 clip of 1 s at 64x112, 2 frames, 1 step, n 2, "
                         "1 rank): seconds")
    args = ap.parse_args()
    if args.smoke:
        args.steps, args.clips, args.n, args.seconds, args.max_new_tokens, args.world_size = 1, 1, 2, 1, 2, 1
        args.size, args.reps, args.response_tokens, args.frames = "tiny", 1, 8, [2, 4]
    scratch = args.workdir is None and args.smoke  # smoke runs side by side must not share a folder
    if args.workdir is None:
        args.workdir = (Path(tempfile.mkdtemp(prefix="evr1_bench_train_smoke")) if scratch
                        else Path(tempfile.gettempdir()) / "evr1_bench_train")
    args.workdir.mkdir(parents=True, exist_ok=True)
    try:
        if args.smoke or args.part == "packing":
            packing(args)
        if args.smoke or args.part == "trainer":
            trainer(args)
    finally:
        if scratch:
            shutil.rmtree(args.workdir, ignore_errors=True)


def trainer(args) -> None:
    """Part 1: the real trainer on generated clips, decode vs cache vs cache without prefix sharing (docstring)."""
    work = args.workdir
    if args.smoke:
        clips_dir = work / f"clips_{args.seconds}s_{SMOKE_CLIP_HW[0]}p30"
        hw = dict(zip(("height", "width"), SMOKE_CLIP_HW))
    else:
        clips_dir = work / f"clips_{args.seconds}s_720p30"  # bench_cache.py's layout: its clips can be copied in
        hw = {}
    clips_dir.mkdir(exist_ok=True)
    clips = [make_clip(clips_dir / f"clip{i}.mp4", args.seconds, seed=i, **hw) for i in range(args.clips)]
    data = work / "train.jsonl"
    data.write_text("\n".join(json.dumps(r) for r in _records(clips)) + "\n")
    model_dir = work / f"model-{args.size}"
    if not (model_dir / "config.json").exists():
        make_tiny(FAMILY[args.size], model_dir, seed=0, **SIZES[args.size])
    dtype = args.dtype or ("bfloat16" if args.device == "cuda" else "float32")
    run_root = work / "runs"
    base = trainer_overrides(args, data, model_dir, run_root, dtype)
    cfg = load_config(ROOT / "conf/tiny.yaml", base)
    samples = pipeline.stage_ingest(cfg)
    model = pipeline.stage_model(cfg)
    rows = read_samples(samples.uri, split="train")

    decode_cfg = load_config(ROOT / "conf/tiny.yaml", [*base, "cache.enabled=false"])
    decoded = _run(decode_cfg, rows, None, model_dir, run_root / "ckpt-decode")
    frames = pipeline.stage_cache(cfg, samples, model)
    cached = _run(cfg, rows, frames.uri, model_dir, run_root / "ckpt-cache")
    unshared_cfg = load_config(ROOT / "conf/tiny.yaml", [*base, "trainer.share_prompt_prefix=false"])
    unshared = _run(unshared_cfg, rows, frames.uri, model_dir, run_root / "ckpt-unshared")
    driver_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    old_bytes, old_seconds, old_prompt = previous_path_message(model_dir, cfg, rows)
    frame_shape = old_prompt.videos[0].frames.shape[:3]
    load = None
    if args.rss_model:
        rss_dir = work / ("model-rss-smoke" if args.smoke else "model-rss")
        if not (rss_dir / "config.json").exists():
            make_tiny("qwen3_vl", rss_dir, seed=0, **(SIZES["tiny"] if args.smoke else RSS_SIZES))
        weights = sum(p.stat().st_size for p in rss_dir.glob("*.safetensors")) / 2**20
        load = {"checkpoint_mb": round(weights, 1), "every_rank_reads": load_rss(rss_dir, cfg, meta=False),
                "rank0_reads_meta_elsewhere": load_rss(rss_dir, cfg, meta=True)}

    def step_s(h):
        return _mean(h, "time/step_s")

    keys = ["time/step_s", "time/data_wait_s", "time/rollout_s", "time/log_probs_s", "time/update_s", "time/sync_s",
            "perf/driver_bytes_per_prompt", "perf/vision_passes_per_prompt"]
    print("| run | step | " + " | ".join(k.split("/")[1] for k in keys) + " |")
    print("| --- | --- | " + " | ".join("---" for _ in keys) + " |")
    for name, hist in (("decode", decoded), ("cache", cached), ("cache, unshared", unshared)):
        for h in hist:
            print(f"| {name} | {h['step']} | " + " | ".join(f"{h[k]:.3f}" for k in keys) + " |")
    wait = sum(h["time/data_wait_s"] for h in cached[1:] or cached) / sum(h["time/step_s"] for h in cached[1:] or cached)
    out = {
        "part": "trainer", "smoke": args.smoke,
        "device": args.device, "size": args.size, "dtype": dtype, "steps": args.steps, "clips": args.clips, "n": args.n,
        "frames": "x".join(map(str, frame_shape)), "prompt_tokens": len(old_prompt), "world_size": args.world_size,
        "driver_bytes_per_prompt": max(h["perf/driver_bytes_per_prompt"] for h in cached),
        "previous_path_bytes_per_prompt_per_destination": old_bytes,
        "previous_path_driver_encode_s_per_prompt": round(old_seconds, 3),
        "data_wait_fraction": round(wait, 4),
        "vision_passes_per_prompt": _mean(cached, "perf/vision_passes_per_prompt", skip_first=False),
        "vision_passes_per_prompt_unshared": _mean(unshared, "perf/vision_passes_per_prompt", skip_first=False),
        "cache_vs_decode_step_speedup": round(step_s(decoded) / step_s(cached), 3),
        "step_s": {"decode": round(step_s(decoded), 3), "cache": round(step_s(cached), 3)},
        "breakdown_s": {k.split("/")[1]: round(_mean(cached, k), 3) for k in keys[:6]},
        "prefix_sharing_logprob_speedup": round(_mean(unshared, "time/log_probs_s") / _mean(cached, "time/log_probs_s"), 3),
        "prefix_sharing_update_speedup": round(_mean(unshared, "time/update_s") / _mean(cached, "time/update_s"), 3),
        "step_s_unshared": round(step_s(unshared), 3),
        "peak_rss_mb": {"driver": round(driver_rss, 1),
                        "rollout": round(max(h["perf/rollout_peak_rss_mb"] for h in cached + decoded + unshared), 1),
                        "policy_rank": round(max(h["perf/rank_peak_rss_mb"] for h in cached + decoded + unshared), 1)},
        # Each run starts its own actors: the larger rank's peak RSS (and the rollout worker's) per run.
        "peak_rss_mb_by_run": {name: {"policy_rank": round(max(h["perf/rank_peak_rss_mb"] for h in hist), 1),
                                      "rollout": round(max(h["perf/rollout_peak_rss_mb"] for h in hist), 1)}
                               for name, hist in (("decode", decoded), ("cache", cached), ("cache_unshared", unshared))},
        "max_tokens_per_micro_batch": args.max_tokens_per_micro_batch,
        "micro_batches_per_rank": {name: _mean(hist, "perf/update_micro_batches", skip_first=False)
                                   for name, hist in (("cache", cached), ("cache_unshared", unshared))
                                   if "perf/update_micro_batches" in hist[0]},
        "model_load_peak_rss_mb_per_rank": load,
    }
    print(json.dumps(out))


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    main()
