"""The GPU path in one command: vLLM rollouts with weight sync, and the suite runner on vLLM (issue 17, items 5-6).

Run (on a GPU node, in the evr1-gpu image or any environment with vLLM 0.32 and a CUDA GPU):
    python benchmarks/gpu_smoke.py [--families qwen2_5_vl qwen3_vl] [--steps 3] [--out gpu_smoke.md]

NOT EXECUTED YET: written on a machine without a GPU. Every check prints its measured figure and
the script exits non-zero when one fails; paste its markdown into docs/performance.md (GPU section).

Per family, on a random-init model of a few hundred million parameters built from config here:
1. prompt tokens: the token ids vLLM runs for a video prompt (`RequestOutput.prompt_token_ids`) equal
   the trainer's `encode_prompt` ids, wrapper and timestamp tokens included (vLLM issue #46817);
2. GRPO end to end: `rollout.engine=vllm`, `trainer.device=cuda`, `--steps` steps through the real
   pipeline (ingest, frame cache, train, merge); the step-time split and tokens/s from its MLflow run;
3. weight sync: a vLLM engine on the base weights, then `update_weights(<trained weights>)` (the
   trainer's sync path), gives the same log-probs on a fixed prompt as the trained model in
   transformers (and different ones before the sync);
4. cached frames: greedy generation from frames read from the Lance cache equals generation from
   frames decoded on the fly, and the frames are byte-identical.
Then (item 6) the suite runner on vLLM's AsyncLLM vs a synchronous load-then-generate loop on
`--items` synthetic videos split into 4 benchmarks: items/s and the engine's idle share.

`--smoke`: the same checks at the smallest sizes (the default tiny model, the first family only, 1 GRPO
step, 8 suite items), seconds to a minute. Where there is no CUDA device or no vLLM (CI, laptops) it runs
the part that needs neither, on the HF engine on the CPU: checks 2 (GRPO through the pipeline, HF
rollouts, one rank) and 4 (cached frames, greedy HF generation) and the suite comparison; checks 1 and 3
are vLLM's own and are reported as skipped. CI runs it (tests/benchmarks) so the script cannot rot.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from evr1 import pipeline  # noqa: E402
from evr1.cache import FrameReader  # noqa: E402
from evr1.config import load_config  # noqa: E402
from evr1.data import make_synthetic  # noqa: E402
from evr1.engines import SamplingParams, make_engine  # noqa: E402
from evr1.eval import ResultStore  # noqa: E402
from evr1.eval.runner import SuiteJob, run_suite  # noqa: E402
from evr1.models import load_adapter, make_tiny  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
# About 0.3 B parameters: a 16-layer 1024-wide language model and an 8-block vision tower.
SIZES = dict(hidden_size=1024, intermediate_size=2816, num_hidden_layers=16, num_attention_heads=16,
             num_key_value_heads=4, vision_depth=8, vision_hidden_size=768, vision_heads=12)
GREEDY = SamplingParams(n=1, max_new_tokens=32, temperature=0.0, seed=0)
VLLM_OPTIONS = dict(gpu_memory_utilization=0.35, max_model_len=8192)
# --smoke without CUDA or vLLM: the HF engine on the CPU (make_engine drops the vLLM-only options).
HF_CPU_OPTIONS = dict(device="cpu", dtype="float32")


def engine_options(engine: str) -> dict:
    return VLLM_OPTIONS if engine == "vllm" else HF_CPU_OPTIONS


def parameters(model_dir: Path) -> int:
    import math

    from safetensors import safe_open

    total = 0
    for f in model_dir.glob("*.safetensors"):
        with safe_open(str(f), "pt") as st:
            total += sum(math.prod(st.get_slice(k).get_shape()) for k in st.keys())
    return total


def video_prompt(model_dir: Path, video: Path, reader: FrameReader | None = None):
    adapter = load_adapter(model_dir)
    from evr1.video.clip import FrameParams

    reader = reader or FrameReader(None, FrameParams(factor=adapter.family.factor), mode="decode-only")
    return adapter.encode_prompt("What happens in the video? <answer></answer>", videos=[reader.video(str(video))])


def check_prompt_tokens(model_dir: Path, video: Path) -> dict:
    """Item 5c: the ids vLLM ran for the prompt equal the trainer's, video tokens included."""
    engine = make_engine("vllm", model_dir=str(model_dir), **VLLM_OPTIONS)
    prompt = video_prompt(model_dir, video)
    out = engine.llm.generate([engine._request(prompt)], engine._sampling_params(GREEDY), use_tqdm=False)[0]
    ran, ours = list(out.prompt_token_ids), list(prompt.input_ids)
    first = next((k for k, (a, b) in enumerate(zip(ran, ours)) if a != b), None if len(ran) == len(ours) else min(len(ran), len(ours)))
    del engine
    torch.cuda.empty_cache()
    return {"prompt_tokens_equal": ran == ours, "prompt_tokens": len(ours), "vllm_prompt_tokens": len(ran),
            "first_difference": first}


def grpo(family: str, model_dir: Path, root: Path, steps: int, *, engine: str = "vllm",
         smoke: bool = False) -> tuple[dict, Path, object]:
    """Item 5a: a few GRPO steps with `engine` rollouts through the real pipeline; (figures, merged dir, cfg).
    `engine="hf"`: HF rollouts and the policy on the CPU (float32), for --smoke without CUDA or vLLM."""
    device, dtype = ("cuda", "bfloat16") if engine == "vllm" else ("cpu", "float32")
    sizes = (["trainer.prompts_per_step=2", "rollout.n=2", "rollout.max_new_tokens=4", "data.synth.n=4",
              "data.synth.heldout=1", "cache.workers=1"] if smoke else
             ["trainer.prompts_per_step=4", "rollout.n=4", "rollout.max_new_tokens=64", "data.synth.n=16",
              "data.synth.heldout=2"])
    cfg = load_config(ROOT / "conf" / "tiny.yaml", [
        f"run.root={root}", f"run.name=gpu-smoke-{family}", f"model.path={model_dir}", f"model.dtype={dtype}",
        f"rollout.engine={engine}", f"trainer.device={device}", "trainer.world_size=1", f"trainer.steps={steps}",
        "trainer.warmup_sft_steps=0", *sizes, "eval.enabled=false"])
    t0 = time.perf_counter()
    samples = pipeline.stage_ingest(cfg)
    model = pipeline.stage_model(cfg)
    frames = pipeline.stage_cache(cfg, samples, model)
    ckpt = pipeline.stage_train(cfg, samples, frames, model)
    merged = pipeline.stage_merge(cfg, ckpt, model)
    figures = {"grpo_seconds": time.perf_counter() - t0, "steps": steps, **step_split(cfg)}
    return figures, Path(merged.uri), (cfg, frames, samples)


def step_split(cfg) -> dict:
    """Median per-step timings and throughput the trainer logged to MLflow (keys with time/tokens)."""
    import statistics

    from mlflow.tracking import MlflowClient

    uri = cfg.tracking.uri or pipeline.default_tracking_uri(cfg.run_dir())
    client = MlflowClient(uri)
    runs = client.search_runs([e.experiment_id for e in client.search_experiments()],
                              filter_string="tags.`evr1.stage` = 'train'", max_results=1, order_by=["start_time DESC"])
    if not runs:
        return {}
    out = {}
    for key in runs[0].data.metrics:
        if any(w in key for w in ("time", "seconds", "tokens_per_s", "tok/s")):
            values = [m.value for m in client.get_metric_history(runs[0].info.run_id, key)]
            out[key] = statistics.median(values)
    return out


def check_weight_sync(base_dir: Path, trained_dir: Path) -> dict:
    """Item 5b: vLLM on the base weights, synced to the trained ones, scores a fixed text the same as
    the trained model in transformers (bf16 tolerance), and differently before the sync."""
    from transformers import AutoModelForImageTextToText
    from vllm import SamplingParams as VllmSampling

    adapter = load_adapter(trained_dir)
    ids = adapter.tokenizer.encode("The answer is <answer>A</answer> because the red circle moves left.")
    hf = AutoModelForImageTextToText.from_pretrained(str(trained_dir), dtype=torch.bfloat16).cuda().eval()
    with torch.no_grad():
        logits = hf(input_ids=torch.tensor([ids], device="cuda")).logits.float()[0]
    reference = torch.log_softmax(logits, -1)[torch.arange(len(ids) - 1), torch.tensor(ids[1:])].cpu()
    state = {k: v.to("cuda") for k, v in hf.state_dict().items()}
    del hf, logits
    engine = make_engine("vllm", model_dir=str(base_dir), **VLLM_OPTIONS)

    def vllm_logprobs():
        out = engine.llm.generate([{"prompt_token_ids": ids}], VllmSampling(max_tokens=1, prompt_logprobs=0),
                                  use_tqdm=False)[0]
        return torch.tensor([out.prompt_logprobs[k + 1][ids[k + 1]].logprob for k in range(len(ids) - 1)])

    before = (vllm_logprobs() - reference).abs().max().item()
    engine.update_weights(state)
    after = (vllm_logprobs() - reference).abs().max().item()
    del engine, state
    torch.cuda.empty_cache()
    return {"sync_max_abs_logprob_diff_before": before, "sync_max_abs_logprob_diff_after": after,
            "sync_ok": after < 0.1 < before}


def check_cached_frames(model_dir: Path, run, engine: str = "vllm") -> dict:
    """Item 5d: frames from the Lance cache equal decoded ones, and greedy generation (vLLM; HF under
    --smoke without it) agrees."""
    import numpy as np

    from evr1.data.ingest import read_samples

    cfg, frames, samples = run
    adapter = load_adapter(model_dir)
    params = cfg.cache.frame_params(adapter.family.factor)
    row = next(s for s in read_samples(samples.uri) if s.get("videos"))
    video = row["videos"][0]
    root = cfg.data.data_root
    cached = FrameReader(frames.uri, params, mode="cache-only", data_root=root).video(video)
    decoded = FrameReader(None, params, mode="decode-only", data_root=root).video(video)
    generator = make_engine(engine, model_dir=str(model_dir), **engine_options(engine))
    texts = [generator.generate([adapter.encode_prompt(row["problem"], videos=[clip])], GREEDY)[0][0].token_ids
             for clip in (cached, decoded)]
    del generator
    torch.cuda.empty_cache()
    return {"cached_frames_equal": bool(np.array_equal(cached.frames, decoded.frames)),
            "cached_generation_equal": texts[0] == texts[1]}


def suite_vs_sync(model_dir: Path, tmp: Path, n_items: int, engine: str = "vllm", batch: int = 16,
                  seconds: float = 4.0) -> dict:
    """Item 6: the suite runner on vLLM's AsyncLLM (the HF engine under --smoke without vLLM) vs
    load-a-batch-then-generate, 4 benchmarks."""
    report = make_synthetic(tmp / "suite", n_items, heldout=0, image_fraction=0.0, seconds=seconds)
    rows = [json.loads(line) for line in Path(report.train_path).read_text().splitlines()]
    items = [{"id": r["problem_id"], "problem": r["problem"], "video": str(tmp / "suite" / r["videos"][0])} for r in rows]
    adapter = load_adapter(model_dir)
    from evr1.video.clip import FrameParams

    reader = FrameReader(None, FrameParams(factor=adapter.family.factor), mode="decode-only")

    def load(item):
        return adapter.encode_prompt(item["problem"], videos=[reader.video(item["video"])])

    sync = make_engine(engine, model_dir=str(model_dir), **engine_options(engine))
    sync.generate([load(items[0])], GREEDY)  # warm-up
    t0, loading = time.perf_counter(), 0.0
    for start in range(0, len(items), batch):
        t = time.perf_counter()
        prompts = [load(i) for i in items[start:start + batch]]
        loading += time.perf_counter() - t
        sync.generate(prompts, GREEDY)
    sync_s = time.perf_counter() - t0
    del sync
    torch.cuda.empty_cache()

    suite = make_engine(engine, model_dir=str(model_dir), asynchronous=True, **engine_options(engine))
    jobs = [SuiteJob(benchmark=f"b{j}", items=items[j::4], load=load, score=lambda text, item: {"score": 0.0},
                     store=ResultStore(tmp / f"b{j}.jsonl")) for j in range(4)]
    t0 = time.perf_counter()
    summaries = asyncio.run(run_suite(jobs, engine=suite, sampling=GREEDY, concurrency=8, queue_size=64,
                                      batch_size=batch, timeout_s=600.0))
    suite_s = time.perf_counter() - t0
    return {"suite_items": len(items), "sync_items_per_s": len(items) / sync_s, "sync_engine_idle": loading / sync_s,
            "suite_items_per_s": len(items) / suite_s,
            "suite_engine_idle": next(iter(summaries.values())).engine_wait_fraction,
            "suite_failed": sum(s.failed for s in summaries.values())}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--families", nargs="+", default=["qwen2_5_vl", "qwen3_vl"])
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--items", type=int, default=64, help="synthetic videos for the suite comparison")
    p.add_argument("--out", type=Path, default=None, help="also write the results as markdown here")
    p.add_argument("--smoke", action="store_true",
                   help="smallest sizes (tiny model, first family, 1 step, 8 items); without CUDA or vLLM, "
                        "the checks that need neither, on the HF engine on the CPU")
    args = p.parse_args(argv)
    gpu = torch.cuda.is_available() and importlib.util.find_spec("vllm") is not None
    if not args.smoke and not torch.cuda.is_available():
        sys.exit("gpu_smoke: no CUDA device (run it on a GPU node, e.g. in the evr1-gpu image)")
    if args.smoke:
        args.families, args.steps, args.items = args.families[:1], 1, 8
    engine = "vllm" if gpu or not args.smoke else "hf"
    sizes = {} if args.smoke else SIZES
    device = ({"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__} if torch.cuda.is_available()
              else {"gpu": None, "torch": torch.__version__})
    results: dict[str, dict] = {"device": {**device, "engine": engine, "smoke": args.smoke}}
    with tempfile.TemporaryDirectory(prefix="gpu-smoke-") as tmp_name:
        tmp = Path(tmp_name)
        video = make_synthetic(tmp / "probe", 1, heldout=0, image_fraction=0.0, seconds=1.0 if args.smoke else 4.0)
        first = json.loads(Path(video.train_path).read_text().splitlines()[0])
        probe_video = tmp / "probe" / first["videos"][0]
        for family in args.families:
            base = make_tiny(family, tmp / f"{family}-base", seed=0, **sizes)
            r = {"parameters": parameters(base)}
            if engine == "vllm":
                r.update(check_prompt_tokens(base, probe_video))
            else:
                r["skipped"] = "prompt tokens and weight sync: vLLM's own checks (no CUDA or no vLLM here)"
            figures, merged, run = grpo(family, base, tmp / "runs", args.steps, engine=engine, smoke=args.smoke)
            r.update(figures)
            if engine == "vllm":
                r.update(check_weight_sync(base, merged))
            r.update(check_cached_frames(merged, run, engine))
            results[family] = r
            print(json.dumps({family: r}), flush=True)
        results["suite"] = suite_vs_sync(tmp / f"{args.families[0]}-base", tmp, args.items, engine,
                                         batch=4 if args.smoke else 16, seconds=1.0 if args.smoke else 4.0)
        print(json.dumps({"suite": results["suite"]}), flush=True)
    ok = all(r.get(k, True) for r in results.values() for k in ("prompt_tokens_equal", "sync_ok",
                                                                   "cached_frames_equal", "cached_generation_equal"))
    ok = ok and results["suite"]["suite_failed"] == 0
    if args.out:
        lines = ["| check | " + " | ".join(args.families) + " |", "| --- |" + " ---: |" * len(args.families)]
        keys = sorted({k for f in args.families for k in results[f]})
        lines += [f"| {k} | " + " | ".join(str(results[f].get(k, "")) for f in args.families) + " |" for k in keys]
        lines += ["", "| suite (vLLM) | value |", "| --- | ---: |"]
        lines += [f"| {k} | {v} |" for k, v in results["suite"].items()]
        args.out.write_text(f"GPU: {results['device']}\n\n" + "\n".join(lines) + "\n")
    print(json.dumps({"ok": ok}))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
