"""Peak memory of response log-probs + entropy: today's full fp32 logits against chunks over the valid tokens.

Today (`runtime.token_log_probs` on `lm_head(hidden)`): logits for every [B, Lr] position, padding included,
then fp32, / T, logsumexp, softmax × logits, all over the whole vocabulary at once, and kept for the backward.
Chunked (`runtime.chunked_token_log_probs`): the head applied to `--chunk` valid response tokens at a time,
nothing [·, V] saved for the backward. Each variant runs in its own process, forward + backward (the update)
and forward alone under no_grad (the old/reference log-prob pass); the figure is the process's peak
resident memory above what it held before the pass (VmHWM reset through /proc/self/clear_refs). CPU, fp32.
`--device cuda`: the same passes on the GPU with bf16 hidden states and head (as under the mixed-precision
policy), the figure being the CUDA allocator's peak above what it held before the pass.

    python benchmarks/bench_logprob_memory.py                    # one JSON line
    python benchmarks/bench_logprob_memory.py --length 2048 --chunk 512
    python benchmarks/bench_logprob_memory.py --device cuda --hidden 3584 --length 8192 --rows 4
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _rss_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def _reset_peak() -> bool:
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


def run_one(args) -> dict:
    """In this process: one pass of `args.variant`, its peak memory above the baseline (MiB) and time."""
    import torch

    from evr1.models.runtime import chunked_token_log_probs, token_log_probs

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    cuda = args.device == "cuda"
    dtype = torch.bfloat16 if cuda else torch.float32
    lengths = [args.length] + [max(1, int(args.length * args.short))] * (args.rows - 1)
    b, lr, v, h = len(lengths), args.length, args.vocab, args.hidden
    hidden = torch.randn(b, lr, h, device=args.device, dtype=dtype).requires_grad_(args.mode == "train")
    weight = (torch.randn(v, h, device=args.device) / h ** 0.5).to(dtype).requires_grad_(args.mode == "train")
    targets = torch.randint(0, v, (b, lr), device=args.device)
    mask = torch.arange(lr, device=args.device)[None, :] < torch.tensor(lengths, device=args.device)[:, None]
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        baseline, exact_peak = torch.cuda.memory_allocated(), True
    else:
        baseline = _rss_kib("VmRSS")
        exact_peak = _reset_peak()
    start = time.perf_counter()
    with torch.set_grad_enabled(args.mode == "train"):
        if args.variant == "today":
            lp, ent = token_log_probs(torch.nn.functional.linear(hidden, weight), targets, mask, args.temperature, True)
        else:
            lp, ent = chunked_token_log_probs(hidden, weight, targets, mask, args.temperature, True,
                                              chunk_tokens=args.chunk)
        if args.mode == "train":
            (-(lp.sum()) - 0.01 * ent.sum()).backward()
    if cuda:
        torch.cuda.synchronize()
        seconds = time.perf_counter() - start
        peak_mib = (torch.cuda.max_memory_allocated() - baseline) / 2**20
    else:
        seconds = time.perf_counter() - start
        peak = _rss_kib("VmHWM") if exact_peak else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        peak_mib = (peak - baseline) / 1024
    return {"peak_mib": round(peak_mib, 1), "seconds": round(seconds, 3),
            "checksum": round(float(lp.sum() + ent.sum()), 3), "exact_peak": exact_peak}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--vocab", type=int, default=151_936, help="Qwen2.5-VL / Qwen3-VL vocabulary")
    p.add_argument("--hidden", type=int, default=256, help="hidden size (small: the logits are what is measured)")
    p.add_argument("--length", type=int, default=1024, help="response length Lr of the longest row")
    p.add_argument("--rows", type=int, default=2)
    p.add_argument("--short", type=float, default=0.25, help="the other rows' response length, as a share of Lr")
    p.add_argument("--chunk", type=int, default=256, help="valid tokens per chunk")
    p.add_argument("--temperature", type=float, default=0.7)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu", help="cuda: bf16 inputs, the CUDA allocator's peak")
    p.add_argument("--variant", choices=["today", "chunked"], help=argparse.SUPPRESS)
    p.add_argument("--mode", choices=["train", "score"], help=argparse.SUPPRESS)
    p.add_argument("--smoke", action="store_true", help="seconds-long run at tiny sizes (CI): the same four passes")
    args = p.parse_args()
    if args.smoke:
        args.vocab, args.hidden, args.length, args.chunk, args.threads = 4096, 32, 64, 16, 1
    if args.variant:
        print(json.dumps(run_one(args)))
        return
    results = {}
    for mode in ("train", "score"):
        for variant in ("today", "chunked"):
            cmd = [sys.executable, __file__, "--variant", variant, "--mode", mode] + [
                f"--{k}={getattr(args, k)}" for k in ("vocab", "hidden", "length", "rows", "short", "chunk",
                                                      "temperature", "threads", "device")]
            out = subprocess.run(cmd, capture_output=True, text=True, check=True, cwd=ROOT,
                                 env={**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))})
            results[f"{mode}_{variant}"] = json.loads(out.stdout.strip().splitlines()[-1])
    lengths = [args.length] + [max(1, int(args.length * args.short))] * (args.rows - 1)
    summary = {
        "bench": "logprob_memory", "smoke": args.smoke, "device": args.device, "dtype": "bfloat16" if args.device == "cuda" else "float32", "vocab": args.vocab, "hidden": args.hidden,
        "rows": args.rows, "response_length": args.length, "valid_tokens": sum(lengths),
        "padded_positions": args.rows * args.length, "chunk_tokens": args.chunk,
        **{f"{k}_peak_mib": r["peak_mib"] for k, r in results.items()},
        **{f"{k}_s": r["seconds"] for k, r in results.items()},
        "train_ratio": round(results["train_today"]["peak_mib"] / max(results["train_chunked"]["peak_mib"], 1e-9), 1),
        "score_ratio": round(results["score_today"]["peak_mib"] / max(results["score_chunked"]["peak_mib"], 1e-9), 1),
        "same_values": abs(results["train_today"]["checksum"] - results["train_chunked"]["checksum"])
        <= 1e-3 * max(1.0, abs(results["train_today"]["checksum"])),
        "exact_peak": all(r["exact_peak"] for r in results.values()),
    }
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
