"""One long synthetic video, sequence parallel 1 (one rank) against 2 (two gloo ranks), side by side.

A random-init Qwen3-VL wider than the test models (`--hidden`, `--layers`; real vision geometry: patch
16, merge 2, temporal patch 2) scores one response to one long video prompt: a training step's
forward + backward of a token-mean log-prob loss, with gradient checkpointing unless
`--no-checkpointing`. Per rank it reports the step time (best of `--repeats` after a warm-up), the
peak bytes torch's allocator held during the step (torch.profiler allocation events,
evr1/train/memory_probe.py), the process's peak RSS, and what `evr1.train.plan` predicts for that rank.
sp=2 also checks its log-probs against sp=1's. Each rank runs one thread (`--threads`), so sp=2 uses
twice the cores: the time column shows the split's speed-up and its all-to-all cost together.

Run:  .venv/bin/python benchmarks/bench_long_video.py [--frames 512 --height 64 --width 96 --hidden 256 --layers 4]
Prints one JSON line. CPU only here; on a GPU the same script with --device cuda would need NCCL (unrun).
`--smoke`: the same path at the smallest sizes (2 frames of 32×32, hidden 64, 1 layer, 1 repeat), seconds
long: CI runs it (tests/benchmarks) so the script cannot rot; its figures mean nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import socket
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from evr1.models import load_adapter, load_model, make_tiny  # noqa: E402
from evr1.train.plan import STATIC, Setup, Tokens, arch_from_config, memory  # noqa: E402
from evr1.train.memory_probe import peak_allocated_bytes  # noqa: E402
from evr1.train.workers.sequence_parallel import sp_groups, sp_response_log_probs  # noqa: E402
from evr1.video.clip import VideoClip  # noqa: E402
from random_media import random_clip  # noqa: E402

RESPONSE = 128


def _clip(frames: int, height: int, width: int) -> VideoClip:
    return random_clip(frames, height, width)


def _rank(rank: int, world: int, port: int, args: argparse.Namespace, model_dir: str, out) -> None:
    torch.set_num_threads(args.threads)
    if world > 1:
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        dist.init_process_group("gloo", rank=rank, world_size=world)
    group = sp_groups(world, world).group if world > 1 else None
    ad, model = load_adapter(model_dir), load_model(model_dir)
    model.train()
    if args.checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    prompt = ad.encode_prompt("<video> Describe what happens.", videos=[_clip(args.frames, args.height, args.width)])
    batch = ad.collate([prompt], [list(range(20, 20 + RESPONSE))]).to("cpu", torch.float32)

    def step():
        model.zero_grad(set_to_none=True)
        lp, _ = sp_response_log_probs(model, batch, group)
        (-lp.sum() / batch.response_mask.sum()).backward()
        return lp.detach()

    step()  # warm-up
    times = []
    for _ in range(args.repeats):
        if group is not None:
            dist.barrier(group)
        t = time.perf_counter()
        lp = step()
        times.append(time.perf_counter() - t)
    peak, _ = peak_allocated_bytes(step)
    video = int((batch.mm_token_type_ids == 2).sum())
    tokens = Tokens(args.frames, args.height, args.width, video, batch.input_ids.shape[1] - video - RESPONSE, RESPONSE,
                    ad.family.merge_size)
    plan = memory(arch_from_config(model.config), tokens, Setup(1, world, "float32", args.checkpointing))
    planned = sum(v for k, v in plan.items() if k not in STATIC or k.startswith("gradients"))
    out.put({"rank": rank, "step_s": min(times), "peak_alloc_mib": peak / 2**20, "plan_mib": planned / 2**20,
             "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
             "tokens": int(batch.input_ids.shape[1]), "log_probs": lp.tolist()})
    if world > 1:
        dist.destroy_process_group()


def _run(world: int, args: argparse.Namespace, model_dir: str) -> list[dict]:
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    procs = [ctx.Process(target=_rank, args=(r, world, port, args, model_dir, out)) for r in range(world)]
    for p in procs:
        p.start()
    results = [out.get(timeout=1800) for _ in procs]
    for p in procs:
        p.join()
    return sorted(results, key=lambda r: r["rank"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--frames", type=int, default=512)
    ap.add_argument("--height", type=int, default=64)
    ap.add_argument("--width", type=int, default=96)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--no-checkpointing", dest="checkpointing", action="store_false")
    ap.add_argument("--smoke", action="store_true",
                    help="smallest sizes (2 frames of 32x32, hidden 64, 1 layer, 1 repeat): seconds")
    args = ap.parse_args()
    if args.smoke:
        args.frames, args.height, args.width, args.hidden, args.layers, args.repeats = 2, 32, 32, 64, 1, 1
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = str(make_tiny("qwen3_vl", Path(tmp) / "m", seed=0, hidden_size=args.hidden,
                                  intermediate_size=3 * args.hidden, num_hidden_layers=args.layers,
                                  num_attention_heads=8, num_key_value_heads=4, vision_hidden_size=64,
                                  max_position_embeddings=65536))
        sp1, sp2 = _run(1, args, model_dir), _run(2, args, model_dir)
    ref = torch.tensor(sp1[0]["log_probs"])
    err = max(float((torch.tensor(r["log_probs"]) - ref).abs().max()) for r in sp2)
    keys = ("step_s", "peak_alloc_mib", "plan_mib", "peak_rss_mib")
    print(json.dumps({
        "smoke": args.smoke, "device": "cpu", "frames": args.frames, "frame_hw": [args.height, args.width],
        "tokens": sp1[0]["tokens"],
        "hidden": args.hidden, "layers": args.layers, "checkpointing": args.checkpointing, "threads_per_rank": args.threads,
        "sp1": {k: round(sp1[0][k], 3) for k in keys},
        "sp2": [{k: round(r[k], 3) for k in keys} for r in sp2],
        "speedup": round(sp1[0]["step_s"] / max(r["step_s"] for r in sp2), 3),
        "peak_alloc_ratio_sp2_over_sp1": round(max(r["peak_alloc_mib"] for r in sp2) / sp1[0]["peak_alloc_mib"], 3),
        "max_abs_logprob_diff": err,
    }))


if __name__ == "__main__":
    main()
