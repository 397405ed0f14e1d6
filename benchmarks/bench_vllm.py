"""HF against vLLM generation on a video prompt (n samples), and vLLM weight-sync cost against model size.

Runs in the vLLM environment (`make test-vllm` builds it):

    VLLM_ENABLE_V1_MULTIPROCESSING=0 .venv-vllm/bin/python benchmarks/bench_vllm.py [--sizes tiny,medium]

For each model size (random prompt-dependent weights from `make_tiny`, head_dim ≥ 32): one warm-up,
then the best of `--repeats` timed runs of the same video prompt with `n` samples at temperature 1
(`max_new_tokens` each, eos suppressed by nothing: lengths vary) on each engine, as generated tokens per
second; then `update_weights` of the whole state dict into the vLLM engine (seconds, bytes sent,
parameter count, buckets). Prints one JSON object per size and a Markdown table (docs/vllm.md).
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

import numpy as np

SIZES = {
    "tiny": {"num_attention_heads": 2, "num_key_value_heads": 1},
    # about 80 M parameters: 12 layers of hidden 768, 12 heads of 64, 4 KV heads
    "medium": {"hidden_size": 768, "intermediate_size": 2048, "num_hidden_layers": 12, "num_attention_heads": 12,
               "num_key_value_heads": 4, "vision_hidden_size": 256, "vision_heads": 4, "vision_depth": 2},
}


def video_prompt(adapter, frames: int):
    from evr1.video.clip import VideoClip

    side = 4 * adapter.video.factor
    px = np.random.default_rng(0).integers(0, 256, (frames, side, side, 3), dtype=np.uint8)
    clip = VideoClip(frames=px, fps=2.0, frame_indices=list(range(0, 2 * frames, 2)), total_frames=2 * frames,
                     duration=frames)
    return adapter.encode_prompt("<video>What happens in this video? Think step by step.", videos=[clip])


def timed(engine, prompt, params, repeats: int) -> tuple[float, int]:
    engine.generate([prompt], params)  # warm-up
    best, tokens = float("inf"), 0
    for _ in range(repeats):
        start = time.perf_counter()
        (out,) = engine.generate([prompt], params)
        elapsed = time.perf_counter() - start
        if elapsed < best:
            best, tokens = elapsed, sum(len(g.token_ids) for g in out)
    return best, tokens


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--family", default="qwen2_5_vl")
    ap.add_argument("--sizes", default="tiny,medium")
    ap.add_argument("--n", type=int, default=8)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--frames", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--smoke", action="store_true", help="seconds-long run (CI, .venv-vllm): tiny model, 2 x 4 tokens")
    args = ap.parse_args()
    if args.smoke:
        args.sizes, args.n, args.max_new_tokens, args.frames, args.repeats = "tiny", 2, 4, 2, 1
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")

    from evr1.engines import SamplingParams
    from evr1.engines.hf import HFEngine
    from evr1.engines.vllm_engine import VLLMEngine
    from evr1.models import make_tiny

    params = SamplingParams(n=args.n, max_new_tokens=args.max_new_tokens, temperature=1.0, seed=0)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for size in args.sizes.split(","):
            model_dir = make_tiny(args.family, Path(tmp) / size, seed=0, init="prompt_dependent", **SIZES[size])
            hf = HFEngine.from_pretrained(model_dir, dtype=args.dtype, device="cpu", batch_size=args.n)
            prompt = video_prompt(hf.adapter, args.frames)
            hf_s, hf_tokens = timed(hf, prompt, params, args.repeats)
            state = {k: v.detach().clone() for k, v in hf.model.state_dict().items()}
            n_params = sum(p.numel() for p in hf.model.parameters())
            del hf
            vl = VLLMEngine.from_pretrained(model_dir, dtype=args.dtype, enforce_eager=True, max_model_len=4096,
                                            kv_cache_gib=2)
            vl_s, vl_tokens = timed(vl, prompt, params, args.repeats)
            vl.update_weights(state)  # warm-up sync
            report = min((vl.update_weights(state) for _ in range(args.repeats)), key=lambda r: r.seconds)
            vl.llm.llm_engine.engine_core.shutdown()
            del vl
            row = {"family": args.family, "size": size, "params": n_params, "prompt_tokens": len(prompt),
                   "n": args.n, "hf_tokens_per_s": hf_tokens / hf_s, "vllm_tokens_per_s": vl_tokens / vl_s,
                   "hf_s": hf_s, "vllm_s": vl_s, "sync_s": report.seconds, "sync_bytes": report.bytes,
                   "sync_buckets": report.buckets, "dtype": args.dtype, "smoke": args.smoke}
            print(json.dumps(row), flush=True)
            rows.append(row)
    print("\n| size | parameters | prompt tokens | HF tok/s | vLLM tok/s | sync s | sync MB | buckets |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        print(f"| {r['size']} | {r['params'] / 1e6:.1f} M | {r['prompt_tokens']} | {r['hf_tokens_per_s']:.0f} | "
              f"{r['vllm_tokens_per_s']:.0f} | {r['sync_s']:.2f} | {r['sync_bytes'] / 2**20:.0f} | {r['sync_buckets']} |")


if __name__ == "__main__":
    main()
