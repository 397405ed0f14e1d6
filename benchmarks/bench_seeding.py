"""What per-prompt seeds cost in generation: `rollout.seeding: per_prompt` against `engine`.

Per-prompt seeds make each prompt's samples independent of the call, the batch and the engine that
generates them (and of a resume); the price differs per engine. The HF engine draws each sample's
row from a generator of its own inside one batched call (`evr1/engines/row_sampler.py`); before
that it generated one prompt per call, the shape the `one_prompt_per_call` mode keeps (the same
per-prompt seeds, one `generate` per prompt) so the two can be compared in one run. vLLM gives every
request its own generator, which its sampler serves one request at a time at every token (and, on
CUDA, without FlashInfer). This runs the modes side by side on the same prompts, in one process,
best of `--repeats`:

    PYTHONPATH=. .venv/bin/python benchmarks/bench_seeding.py                      # HF engine
    PYTHONPATH=. VLLM_CPU_KVCACHE_SPACE=2 .venv-vllm/bin/python benchmarks/bench_seeding.py --engine vllm

Prompts: `--prompts` short text prompts (tokens of a tiny random model's vocabulary, so decoding
runs to `--max-new-tokens`), `--n` samples each, temperature 1. Prints one JSON line per engine with
each mode's seconds and tokens/s and the ratio. `--smoke`: the same path at the smallest sizes (CI).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--engine", choices=("hf", "vllm"), default="hf")
    ap.add_argument("--prompts", type=int, default=32)
    ap.add_argument("--n", type=int, default=8)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--batch-size", type=int, default=8, help="HF: prompts per call without per-prompt seeds")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--smoke", action="store_true", help="seconds-long run: 4 prompts x 2 samples x 4 tokens")
    args = ap.parse_args()
    if args.smoke:
        args.prompts, args.n, args.max_new_tokens, args.repeats, args.batch_size = 4, 2, 4, 1, 2
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")

    from evr1.engines import SamplingParams, make_engine
    from evr1.models import make_tiny
    from evr1.models.tiny import VLLM_SIZES
    from evr1.train.collect import group_seed

    with tempfile.TemporaryDirectory() as tmp:
        model_dir = make_tiny("qwen2_5_vl", Path(tmp) / "m", seed=0, init="prompt_dependent", **VLLM_SIZES)
        options = ({"dtype": "float32", "enforce_eager": True, "max_model_len": 1024, "kv_cache_gib": 1}
                   if args.engine == "vllm" else {"dtype": "float32", "device": "cpu"})
        engine = make_engine(args.engine, model_dir=model_dir, batch_size=args.batch_size, **options)
        adapter = engine.adapter
        prompts = [adapter.encode_prompt(f"Question {i}: which of {i % 7} and {i % 5} is larger? Think.")
                   for i in range(args.prompts)]
        base = {"n": args.n, "max_new_tokens": args.max_new_tokens, "temperature": 1.0}
        modes = {
            "per_prompt": SamplingParams(**base, seeds=tuple(group_seed(0, 1, 0, i, str(i)) for i in range(args.prompts))),
            "engine": SamplingParams(**base, seed=None),
        }
        engine.generate(prompts[:2], modes["engine"])  # warm-up

        def one_prompt_per_call(params: SamplingParams) -> list:
            return [engine.generate([p], replace(params, seeds=(s,)))[0] for p, s in zip(prompts, params.seeds)]

        runs = {name: (lambda params=params: engine.generate(prompts, params)) for name, params in modes.items()}
        if args.engine == "hf":
            runs["one_prompt_per_call"] = lambda: one_prompt_per_call(modes["per_prompt"])
        best: dict[str, tuple[float, int]] = {}
        for _ in range(args.repeats):
            for name, run in runs.items():
                t0 = time.perf_counter()
                outs = run()
                elapsed = time.perf_counter() - t0
                tokens = sum(len(g.token_ids) for group in outs for g in group)
                if name not in best or elapsed < best[name][0]:
                    best[name] = (elapsed, tokens)
        row = {"engine": args.engine, "prompts": args.prompts, "n": args.n, "max_new_tokens": args.max_new_tokens,
               "batch_size": args.batch_size, "repeats": args.repeats, "smoke": args.smoke,
               **{f"{m}_s": round(s, 3) for m, (s, _) in best.items()},
               **{f"{m}_tokens_per_s": round(t / s, 1) for m, (s, t) in best.items()},
               "per_prompt_over_engine": round(best["per_prompt"][0] / best["engine"][0], 3),
               **({"one_prompt_per_call_over_per_prompt": round(best["one_prompt_per_call"][0] / best["per_prompt"][0], 3)}
                  if "one_prompt_per_call" in best else {})}
        print(json.dumps(row), flush=True)
        if args.engine == "vllm":
            engine.llm.llm_engine.engine_core.shutdown()


if __name__ == "__main__":
    main()
