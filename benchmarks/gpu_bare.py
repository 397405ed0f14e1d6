"""The GPU checks a bare CUDA node can run: torch and transformers only, no vLLM, Ray or Lance (issue 33).

`benchmarks/gpu_smoke.py` (`make gpu-check`) is the whole GPU path and needs the evr1-gpu image (vLLM,
Ray, Lance, flash-attn). This script is the part of it that needs only what any CUDA machine with
PyTorch has (plus transformers 5.19 and PyAV for the adapters): the trainer's compute on one GPU, with
the library's own functions, each part in a process of its own, every figure in one JSON:

1. `env`: versions, the GPU, whether flash-attn imports; sdpa's packed (padding-free) pass against its
   padded one on two video prompts of different lengths, bf16 (`gpu_smoke.attention_parity`).
2. `positions`: FSDP2 on one NCCL rank with the trainer's bf16 mixed-precision policy, on the GPU: the
   positions the language model receives in the grouped (shared-prefix), packed and padded passes of a
   Qwen2.5-VL video whose seconds per temporal patch round to 0.5 in bf16, and the largest log-prob gap
   between the passes (the ratio at the start of a step; issue 33 item 7; tests/train/test_bf16_positions.py
   on the CPU).
3. `logprob_memory`: `bench_logprob_memory.py --device cuda` at a 151,936-entry vocabulary and a 7B
   model's width: the CUDA allocator's peak of full logits against chunks of valid tokens (item 4).
4. `train`: a random-init Qwen2.5-VL of 1.87 B parameters (`--size`) loaded the trainer's way
   (`sharded_load.build_sharded`: rank 0's copy on the host, sent tensor by tensor; the reference in bf16),
   the GPU's peak while loading against the model's float32 bytes (item 6); then on a micro-batch of
   `--samples` responses to one 64-frame 384×672 video: the no-grad log-prob pass, and the update
   (packed forward and backward with entropy, AdamW step) timed after one warm-up update: tokens/s, an MFU
   estimate (6 · parameters · tokens / s over the GPU's dense bf16 peak, attention FLOPs left out), and
   the peak allocated memory against `evr1.train.plan.memory` for the same shapes (item 5).

    python benchmarks/gpu_bare.py --json gpu_bare.json        # on a GPU node
    python benchmarks/gpu_bare.py --cpu --json out.json       # the same parts at tiny sizes (CI: --smoke)
    python benchmarks/gpu_bare.py --cpu --full-video --parts profile   # the profile at the real video, on the CPU

`--cpu` runs every part on the CPU at the smallest sizes (gloo instead of NCCL, fp32 compute except
part 2, which applies the CUDA policy on the CPU as its test does): its figures mean nothing; it keeps
the script from rotting. The script exits 1 when a part fails or a check in it does not hold.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

PARTS = ("env", "positions", "logprob_memory", "train", "profile")
# 1.87 B parameters: a Qwen2-1.5B-shaped decoder (vocabulary of the tiny tokenizer) and Qwen2.5-VL's 32-block vision tower.
SIZES = {
    "2b": dict(hidden_size=1536, intermediate_size=8960, num_hidden_layers=28, num_attention_heads=12,
               num_key_value_heads=2, vision_depth=32, vision_hidden_size=1280, vision_heads=16),
    "tiny": dict(vision_depth=2),  # a window block and a full-attention block, as in the real tower
}
PEAK_BF16 = {"H200": 989e12, "H100": 989e12, "A100": 312e12, "L40S": 362e12}
FAMILY = "qwen2_5_vl"


def _env() -> dict:
    """This checkout first on the path, and whatever the caller's PYTHONPATH adds (carried wheels)."""
    return {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _dist(device: str):
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh

    dist.init_process_group("nccl" if device == "cuda" else "gloo", init_method=f"tcp://127.0.0.1:{_port()}",
                            rank=0, world_size=1)
    return init_device_mesh(device, (1,))


def part_env(args) -> dict:
    import importlib.metadata as md

    import torch

    from gpu_smoke import attention_parity

    cuda = args.device == "cuda"
    out: dict = {"python": sys.version.split()[0], "torch": torch.__version__, "torch_cuda": torch.version.cuda,
                 "gpu": torch.cuda.get_device_name(0) if cuda else None,
                 "gpu_gib": round(torch.cuda.get_device_properties(0).total_memory / 2**30, 1) if cuda else None}
    for name in ("transformers", "tokenizers", "av", "flash-attn", "vllm", "ray", "pylance"):
        try:
            out[name] = md.version(name)
        except md.PackageNotFoundError:
            out[name] = None
    try:
        import flash_attn  # noqa: F401

        out["flash_attn_import"] = True
    except Exception as e:  # noqa: BLE001 - reported, not raised: a node without it still runs sdpa
        out["flash_attn_import"] = f"{type(e).__name__}: {e}"[:300]
    ctx = argparse.Namespace(workdir=args.workdir, families=[FAMILY], smoke=args.cpu)
    out.update(attention_parity(ctx, args.device, ("sdpa",)))
    return {**out, "ok": out["attention_ok"]}


def part_positions(args) -> dict:
    import torch
    import torch.distributed as dist

    from evr1.models import load_adapter, load_model, make_tiny
    from evr1.train.workers.precision import precision
    from evr1.train.workers.sharded_load import shard_model
    from tests.models.conftest import make_clip, positions_of_each_pass

    mesh = _dist(args.device)
    model_dir = make_tiny(FAMILY, args.workdir / "positions-model", seed=0)
    ad = load_adapter(model_dir)
    model = load_model(model_dir).to(args.device).train()
    prec = precision("bfloat16", "cuda")  # the CUDA policy (on the CPU too, as its test does)
    shard_model(model, mesh, prec.policy)
    clip = make_clip(ad.family.factor, t=16, h_blocks=1, w_blocks=2, fps=4.004, indices=list(range(16)), total=16, seed=1)
    prompt = ad.encode_prompt("<video> What happens?", videos=[clip])
    responses = [[20, 21, 22, 23, 24], [30, 31, 32]]
    batch = ad.collate([prompt] * len(responses), responses).to(args.device, dtype=prec.compute)
    positions, lps = positions_of_each_pass(model, ad, prompt, responses, batch, prec.compute)
    dist.destroy_process_group()
    gaps = {name: float((lps[name] - lps["packed"]).abs().max()) for name in ("grouped", "padded")}
    same = positions["grouped"] == positions["packed"] == positions["padded"]
    return {"seconds_per_temporal_patch": batch.mm["second_per_grid_ts"].tolist(), "same_positions": same,
            "max_abs_logprob_gap_vs_packed": gaps, "ok": same and max(gaps.values()) <= 2e-2}


def part_logprob_memory(args) -> dict:
    sizes = ["--smoke"] if args.cpu else ["--hidden", "3584", "--length", "8192", "--rows", "4", "--chunk", "2048"]
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_logprob_memory.py"), "--device", args.device,
                          *sizes], capture_output=True, text=True, check=True, cwd=ROOT,
                         env=_env())
    got = json.loads(out.stdout.strip().splitlines()[-1])
    got["ok"] = got["train_ratio"] > 1 and got["score_ratio"] > 1
    return got


def _model(args) -> Path:
    """The train and profile parts' random-init model, made once per workdir."""
    from evr1.models import make_tiny

    out = args.workdir / f"model-{args.size}"
    if not (out / "config.json").exists():
        make_tiny(FAMILY, out, seed=0, **SIZES[args.size])
    return out


def _video_batch(ad, samples: int, response: int, frames: int, source_hw: tuple[int, int], seed: int):
    """`samples` responses of `response` tokens to one `frames`-frame video resized the frame cache's way."""
    import numpy as np

    from evr1.video.sampling import smart_resize, video_pixel_budget
    from random_media import random_clip

    lo, hi = video_pixel_budget(frames, factor=ad.family.factor, min_pixels=None, max_pixels=262144, total_pixels=None)
    h, w = smart_resize(*source_hw, factor=ad.family.factor, min_pixels=lo, max_pixels=hi)
    prompt = ad.encode_prompt("<video>\nWhat happens in the video?", videos=[random_clip(frames, h, w, seed=seed, fps=2.0, stride=1)],
                              defer_media=True)
    rng = np.random.default_rng(seed)
    vocab = len(ad.tokenizer) - 8
    responses = [rng.integers(10, vocab, response).tolist() for _ in range(samples)]
    return ad.collate([prompt] * samples, responses), (h, w)


def part_train(args) -> dict:
    import torch
    import torch.distributed as dist

    from evr1.models import load_adapter
    from evr1.models.packed import packed_response_log_probs
    from evr1.train.plan import STATIC, Setup, Tokens, arch_from_config, memory
    from evr1.train.workers.precision import precision
    from evr1.train.workers.sharded_load import build_sharded, shard_model

    cuda = args.device == "cuda"
    mesh = _dist(args.device)
    t0 = time.perf_counter()
    model_dir = _model(args)
    made_s = time.perf_counter() - t0
    ad = load_adapter(model_dir)
    prec = precision("bfloat16" if cuda else "float32", args.device)
    gib = 2**30

    def peak() -> int:
        return torch.cuda.max_memory_allocated() if cuda else 0

    def policy(m):
        m.train()
        m.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})

    build = dict(rank=0, attn_implementation="sdpa", device=args.device, shard=lambda m: shard_model(m, mesh, prec.policy))
    t0 = time.perf_counter()
    model = build_sharded(model_dir, dtype=prec.storage, prepare=policy, **build)
    load_s = time.perf_counter() - t0
    load_peak, after_policy = peak(), (torch.cuda.memory_allocated() if cuda else 0)
    ref = build_sharded(model_dir, dtype=prec.reference, prepare=lambda m: m.eval().requires_grad_(False), **build)
    ref_added = (torch.cuda.memory_allocated() if cuda else 0) - after_policy
    params = sum(p.numel() for p in model.parameters())
    arch = arch_from_config(model.config)
    out: dict = {"size": args.size, "parameters": params, "make_model_s": round(made_s, 1), "load_s": round(load_s, 1),
                 "fp32_model_gib": round(4 * params / gib, 2), "load_peak_gib": round(load_peak / gib, 2),
                 "policy_resident_gib": round(after_policy / gib, 2), "reference_added_gib": round(ref_added / gib, 2)}

    samples, response = (2, 512) if not args.cpu else (2, 8)
    frames, source = (64, (384, 672)) if not args.cpu else (4, (64, 112))
    batch, hw = _video_batch(ad, samples, response, frames, source, seed=0)
    batch = batch.to(args.device, dtype=prec.compute)
    seq = int(batch.attention_mask.sum())
    video = int((batch.mm_token_type_ids == 2).sum())
    patches = video * ad.family.merge_size ** 2
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-6)
    chunk = 2048

    def sync():
        if cuda:
            torch.cuda.synchronize()

    def timed(fn, reps: int = 2) -> float:
        fn()  # warm-up: kernels, the allocator, Adam's states
        sync()
        start = time.perf_counter()
        for _ in range(reps):
            fn()
        sync()
        return (time.perf_counter() - start) / reps

    def score():
        with torch.no_grad():
            for m in (model, ref):
                packed_response_log_probs(m, batch, chunk_tokens=chunk)

    def update():
        lp, ent = packed_response_log_probs(model, batch, with_entropy=True, chunk_tokens=chunk)
        mask = batch.response_mask.to(lp.dtype)
        (-((lp - 0.01 * ent) * mask).sum() / mask.sum()).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    score_s = timed(score)
    update()  # Adam's states exist from here on, as in every step after the first
    sync()
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    update_s = timed(update)
    update_peak = peak()
    tokens = Tokens(frames, hw[0], hw[1], video // samples, seq // samples - video // samples - response, response,
                    ad.family.merge_size)
    planned = memory(arch, tokens, Setup(1, 1, "bfloat16" if cuda else "float32", True, micro_batch=samples,
                                          reference_model=True, logits_chunk=chunk))
    decoder_params = params - arch.vision_params
    flops = 6 * (decoder_params * seq + arch.vision_params * patches)
    peak_flops = next((v for k, v in PEAK_BF16.items() if cuda and k in torch.cuda.get_device_name(0)), None)
    out.update({
        "frames": frames, "frame_hw": list(hw), "samples": samples, "response_tokens": response,
        "sequence_tokens": seq, "video_tokens": video, "vision_patches": patches,
        "score_pass_s (policy + reference, no grad)": round(score_s, 3),
        "update_s (fwd + bwd + AdamW)": round(update_s, 3),
        "update_tokens_per_s": round(seq / update_s),
        "mfu_estimate": round(flops / update_s / peak_flops, 3) if peak_flops else None,
        "update_peak_gib": round(update_peak / gib, 2),
        "plan_total_gib": round(sum(planned.values()) / gib, 2),
        "plan_activations_gib": round(sum(v for k, v in planned.items() if k not in STATIC) / gib, 2),
        "plan": {k: round(v / gib, 3) for k, v in planned.items() if v},
    })
    if cuda:
        out["update_peak_over_plan"] = round(update_peak / sum(planned.values()), 2)
        # Loading must never hold a second full float32 copy on the GPU: the shard (here, the whole model)
        # plus at most one full tensor.
        out["ok"] = load_peak <= 1.25 * 4 * params
    else:
        out["ok"] = True
    dist.destroy_process_group()
    return out


def part_profile(args) -> dict:
    """Where one update's time goes: the vision tower's and the decoder's forward (timed by hooks that
    synchronise), the rest (backward with recompute, AdamW), and torch.profiler's busiest operators and
    kernel launches, on one response to the same 64-frame video."""
    import torch
    import torch.distributed as dist
    from torch.profiler import ProfilerActivity, profile

    from evr1.models import load_adapter
    from evr1.models.packed import packed_response_log_probs
    from evr1.models.vision_attention import VARLEN_SDPA
    from evr1.train.workers.precision import precision
    from evr1.train.workers.sharded_load import build_sharded, shard_model

    cuda = args.device == "cuda"
    mesh = _dist(args.device)
    model_dir = _model(args)
    ad = load_adapter(model_dir)
    prec = precision("bfloat16" if cuda else "float32", args.device)

    def policy(m):
        m.train()
        m.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})

    model = build_sharded(model_dir, rank=0, dtype=prec.storage, attn_implementation="sdpa", device=args.device,
                          shard=lambda m: shard_model(m, mesh, prec.policy), prepare=policy)
    full = not args.cpu or args.full_video
    frames, source, response = (64, (384, 672), 512) if full else (4, (64, 112), 8)
    batch, _ = _video_batch(ad, 1, response, frames, source, seed=0)
    batch = batch.to(args.device, dtype=prec.compute)
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-6)

    def sync():
        if cuda:
            torch.cuda.synchronize()

    spans: dict[str, float] = {}

    def timer(name: str):
        def before(module, inputs) -> None:  # a pre-hook that returns something would replace the inputs
            sync()
            spans[name] = -time.perf_counter()

        def after(module, inputs, output) -> None:
            sync()
            spans[name] += time.perf_counter()

        return before, after

    for name, module in (("vision_forward_s", model.model.visual), ("decoder_forward_s", model.model.language_model)):
        before, after = timer(name)
        module.register_forward_pre_hook(before)
        module.register_forward_hook(after)

    def update():
        lp, ent = packed_response_log_probs(model, batch, with_entropy=True, chunk_tokens=2048)
        mask = batch.response_mask.to(lp.dtype)
        (-((lp - 0.01 * ent) * mask).sum() / mask.sum()).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    by_attention = {}
    for attention in ("sdpa", VARLEN_SDPA):  # transformers' one call per window, then evr1's one call per block
        model.model.visual.config._attn_implementation = attention
        update()
        sync()
        start = time.perf_counter()
        update()
        sync()
        total = time.perf_counter() - start
        by_attention["per_window" if attention == "sdpa" else "varlen"] = {
            "update_s": round(total, 3), **{k: round(v, 3) for k, v in spans.items()},
            "backward_and_optimizer_s": round(total - sum(spans.values()), 3)}
    with profile(activities=[ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])) as prof:
        update()
        sync()
    events = prof.key_averages()
    device_time = "self_device_time_total" if cuda else "self_cpu_time_total"

    def top(key: str, n: int = 10) -> list[list]:
        rows = sorted(events, key=lambda e: getattr(e, key, 0) or 0, reverse=True)[:n]
        return [[e.key[:80], e.count, round((getattr(e, key, 0) or 0) / 1e6, 3)] for e in rows]

    calls = {e.key: e.count for e in events}
    dist.destroy_process_group()
    return {
        "sequence_tokens": int(batch.attention_mask.sum()), **by_attention,
        "vision_attention_speedup": round(by_attention["per_window"]["update_s"] / by_attention["varlen"]["update_s"], 2),
        "sdpa_calls": sum(c for k, c in calls.items() if "scaled_dot_product" in k and k.startswith("aten::scaled")),
        "kernel_launches": calls.get("cudaLaunchKernel", 0) + calls.get("cuLaunchKernel", 0),
        "top_device_ops [name, calls, s]": top(device_time),
        "top_cpu_ops [name, calls, s]": top("self_cpu_time_total"),
        "ok": True,
    }


def run_part(args) -> int:
    fn = globals()[f"part_{args.part}"]
    result = fn(args)
    print("RESULT " + json.dumps(result), flush=True)
    return 0


def drive(args) -> int:
    results: dict = {}
    ok = True
    for part in args.parts:
        start = time.perf_counter()
        cmd = [sys.executable, __file__, "--part", part, "--workdir", str(args.workdir), "--size", args.size,
               *(["--cpu"] if args.cpu else []), *(["--full-video"] if args.full_video else [])]
        proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=args.part_timeout,
                              env=_env())
        lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
        entry = json.loads(lines[-1][len("RESULT "):]) if lines and proc.returncode == 0 else {
            "ok": False, "error": (proc.stderr or proc.stdout)[-3000:]}
        entry["seconds"] = round(time.perf_counter() - start, 1)
        results[part] = entry
        ok = ok and entry["ok"] is True
        print(json.dumps({part: entry}), flush=True)
        if args.json:
            Path(args.json).write_text(json.dumps({"ok": ok, **results}, indent=1))
    print(json.dumps({"ok": ok}))
    return 0 if ok else 1


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cpu", action="store_true", help="every part on the CPU at tiny sizes (CI)")
    p.add_argument("--smoke", action="store_true", help="the same as --cpu (tests/benchmarks/test_smoke.py runs it)")
    p.add_argument("--parts", nargs="+", choices=PARTS, default=list(PARTS))
    p.add_argument("--size", choices=sorted(SIZES), default=None, help="the train part's model (default 2b; tiny with --cpu)")
    p.add_argument("--json", help="write every figure here, after each part")
    p.add_argument("--full-video", action="store_true",
                   help="with --cpu: the profile part on the real 64-frame 384x672 video (the CPU's own figure)")
    p.add_argument("--workdir", type=Path, default=None)
    p.add_argument("--part-timeout", type=float, default=600)
    p.add_argument("--part", choices=PARTS, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    args.cpu = args.cpu or args.smoke
    args.size = args.size or ("tiny" if args.cpu else "2b")
    args.device = "cpu" if args.cpu else "cuda"
    if args.part:
        return run_part(args)
    if args.workdir is None:
        args.workdir = Path(tempfile.mkdtemp(prefix="gpu_bare-"))
    args.workdir.mkdir(parents=True, exist_ok=True)
    return drive(args)


if __name__ == "__main__":
    sys.exit(main())
