"""The GPU path in one command: imports and flash-attn, vLLM parity, GRPO with weight sync, the suite runner (issue 33, item 10).

Run (on a GPU node, in the evr1-gpu image or any environment with vLLM 0.32 and a CUDA GPU; `make gpu-check`):
    python benchmarks/gpu_smoke.py [--families qwen2_5_vl qwen3_vl] [--steps 3] [--json gpu_check.json] [--out gpu_check.md]

NOT EXECUTED ON A GPU YET: written on machines without one. Every check prints its measured figure and
the script exits non-zero when one fails; paste its markdown into docs/performance.md (GPU section).

Each check runs in a process of its own, in this order (a check that needs an earlier one's output is
skipped when that one failed); vLLM, CUDA contexts and Ray are set up and torn down per process, so no
engine's memory outlives its check (several vLLM engines in one process fail vLLM's free-memory check):
1. `imports`: versions of torch (CUDA), vLLM, flash-attn, transformers, Ray, Lance, PyAV; `import
   flash_attn, flash_attn_2_cuda`, then (CUDA) the same batch of two video prompts of different lengths
   through `flash_attention_2` (packed, varlen: no mask; and padded) and `sdpa` (padded): response
   log-probs agree within bf16 rounding (`flash_attn_ok`). That is the GPU run the configs wait for
   before `flash_attention_2` (conf/*.yaml). On the CPU the same passes run with sdpa alone in fp32;
Per family, on a random-init model of a few hundred million parameters built from config here:
2. `prompt_tokens` (vLLM): the token ids vLLM runs for a video prompt (`RequestOutput.prompt_token_ids`)
   equal the trainer's `encode_prompt` ids, wrapper and timestamp tokens included (vLLM issue #46817);
3. `grpo`: `--steps` GRPO steps with `rollout.engine=vllm`, `trainer.device=cuda` (the engine colocated
   with the rank, asleep while it trains) through the real stages (ingest, frame cache, train, merge);
   the per-step split and tokens/s from the trainer's history, an MFU estimate (6 · parameters · trained
   tokens/s per device over the GPU's dense bf16 peak), the weight-sync seconds, each rank's peak device
   memory next to `evr1 plan`'s total for the same config; then cached frames: greedy generation from
   frames read from the Lance cache equals generation from frames decoded on the fly, byte-identical frames;
4. `weight_sync` (vLLM): an engine on the base weights, then `update_weights(<trained weights>)` (the
   trainer's sync path), gives the same log-probs on a fixed text as the trained model in transformers
   (and different ones before the sync);
Then the suite runner on `--items` synthetic videos split into 4 benchmarks:
5. `suite_sync`: a synchronous load-then-generate loop (items/s, the engine's idle share);
6. `suite_async`: the suite runner on vLLM's AsyncLLM (items/s, idle share, failures).

One JSON (`--json`) holds every figure, each check's seconds and exit status, and `ok`; stdout carries a
JSON line for the imports, one per family, one for the suite and `{"ok": ...}` last.

`--smoke`: the same checks at the smallest sizes (the default tiny model, the first family only, 1 GRPO
step, 8 suite items). Where there is no CUDA device or no vLLM (CI, laptops), or with `--cpu`, it runs the
checks that need neither, on the HF engine on the CPU: 1 (imports; flash-attn reported; sdpa's packed
pass against its padded one, fp32), 3 (GRPO through the pipeline, HF rollouts, one rank; cached frames)
and 5-6; checks 2 and 4 are vLLM's own and are reported as skipped. CI runs it (tests/benchmarks, `make gpu-check-cpu`) so the script cannot rot.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # evr1 from this checkout; nothing heavy is imported at the top: the driver stays light
# About 0.3 B parameters: a 16-layer 1024-wide language model and an 8-block vision tower.
SIZES = dict(hidden_size=1024, intermediate_size=2816, num_hidden_layers=16, num_attention_heads=16,
             num_key_value_heads=4, vision_depth=8, vision_hidden_size=768, vision_heads=12)
VLLM_OPTIONS = dict(gpu_memory_utilization=0.35, max_model_len=8192)
# --smoke without CUDA or vLLM: the HF engine on the CPU (make_engine drops the vLLM-only options).
HF_CPU_OPTIONS = dict(device="cpu", dtype="float32")
# Dense bf16 tensor-core peaks (FLOP/s) for the MFU estimate, by a substring of the device name.
PEAK_BF16 = {"H200": 989e12, "H100": 989e12, "A100": 312e12, "L40S": 362e12, "A10": 125e12}
VLLM_ONLY = ("prompt_tokens", "weight_sync")
CHECKS = ("imports", "prompt_tokens", "grpo", "weight_sync", "suite_sync", "suite_async")
PER_FAMILY = ("prompt_tokens", "grpo", "weight_sync")
NEEDS = {"weight_sync": "grpo"}  # a check and the earlier one whose output it reads


def _greedy():
    from evr1.engines import SamplingParams

    return SamplingParams(n=1, max_new_tokens=32, temperature=0.0, seed=0)


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


def base_model(work: Path, family: str, smoke: bool) -> Path:
    """The random-init model of `family` (made once per workdir: every check of the run reads the same)."""
    from evr1.models import make_tiny

    out = work / f"{family}-base"
    if not (out / "config.json").exists():
        make_tiny(family, out, seed=0, **({} if smoke else SIZES))
    return out


def probe_video(work: Path, smoke: bool) -> Path:
    from evr1.data import make_synthetic

    folder = work / "probe"
    if not (folder / "train.jsonl").exists():
        make_synthetic(folder, 1, heldout=0, image_fraction=0.0, seconds=1.0 if smoke else 4.0)
    first = json.loads((folder / "train.jsonl").read_text().splitlines()[0])
    return folder / first["videos"][0]


def video_prompt(model_dir: Path, video: Path, reader=None):
    from evr1.cache import FrameReader
    from evr1.models import load_adapter
    from evr1.video.clip import FrameParams

    adapter = load_adapter(model_dir)
    reader = reader or FrameReader(None, FrameParams(factor=adapter.family.factor), mode="decode-only")
    return adapter.encode_prompt("What happens in the video? <answer></answer>", videos=[reader.video(str(video))])


def _free_cuda() -> None:
    import torch

    if torch.cuda.is_available():
        torch.cuda.empty_cache()


# --- 1. imports and flash-attn ----------------------------------------------------------------------


def check_imports(ctx: argparse.Namespace) -> dict:
    """Versions, flash-attn's import, and (CUDA) flash_attention_2 against sdpa on one batch."""
    import importlib.metadata as md

    import torch

    cuda = torch.cuda.is_available()
    out: dict = {"torch": torch.__version__, "cuda": cuda, "torch_cuda": torch.version.cuda,
                 "gpu": torch.cuda.get_device_name(0) if cuda else None,
                 "gpu_gib": round(torch.cuda.get_device_properties(0).total_memory / 2**30, 1) if cuda else None,
                 "python": sys.version.split()[0]}
    for dist in ("vllm", "flash-attn", "transformers", "ray", "pylance", "av"):
        try:
            out[dist] = md.version(dist)
        except md.PackageNotFoundError:
            out[dist] = None
    try:
        import flash_attn  # noqa: F401
        import flash_attn_2_cuda  # noqa: F401

        out["flash_attn_import"] = True
    except Exception as e:  # ImportError, or an undefined symbol of a broken build (OSError)
        out["flash_attn_import"] = f"{type(e).__name__}: {e}"[:400]
    if not cuda:  # the same passes with sdpa alone, fp32: the code path runs here too (packed = padded)
        out["flash_attn_parity"] = "skipped: no CUDA device"
        out.update(attention_parity(ctx, "cpu", ("sdpa",)))
    elif ctx.no_flash_attn:
        out["flash_attn_parity"] = "skipped: --no-flash-attn"
    elif out["flash_attn_import"] is not True:
        out["flash_attn_parity"] = "skipped: flash-attn does not import"
        out["flash_attn_ok"] = False
    else:
        out.update(attention_parity(ctx, "cuda", ("sdpa", "flash_attention_2")))
    return out


def attention_parity(ctx: argparse.Namespace, device: str, implementations: tuple[str, ...]) -> dict:
    """Two video prompts of different lengths with 16- and 11-token responses: response log-probs of the
    padded and the packed (padding-free) pass under each attention implementation against sdpa's padded
    pass. CUDA: bf16, flash_attention_2 (varlen kernels, no mask) against sdpa, `flash_attn_ok` within 0.1
    (bf16 logits of a ~600-entry vocabulary), and sdpa's packed pass within the same (`attention_ok`); CPU:
    fp32, sdpa's packed pass against its padded one within 1e-4."""
    import numpy as np
    import torch

    from evr1.models import load_adapter, load_model, response_log_probs
    from evr1.models.packed import packed_response_log_probs
    from random_media import random_clip

    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    model_dir = base_model(ctx.workdir, ctx.families[0], ctx.smoke)
    adapter = load_adapter(model_dir)
    # 224×448: multiples of both families' factors (28 for Qwen2.5-VL, 32 for Qwen3-VL)
    prompts = [adapter.encode_prompt("<video>\nWhat moves?", videos=[random_clip(t, 224, 448, seed=t, fps=2.0, stride=2)],
                                     defer_media=True) for t in (4, 8)]
    rng = np.random.default_rng(0)
    vocab = min(len(adapter.tokenizer), 600)
    responses = [rng.integers(10, vocab, 16).tolist(), rng.integers(10, vocab, 11).tolist()]
    batch = adapter.collate(prompts, responses).to(device, dtype=dtype)
    mask = batch.response_mask.bool()
    lp = {}
    for attn in implementations:
        model = load_model(model_dir, dtype=dtype, attn_implementation=attn).to(device)
        with torch.no_grad():
            lp[f"{attn}_padded"] = response_log_probs(model, batch)[0].float()
            lp[f"{attn}_packed"] = packed_response_log_probs(model, batch)[0].float()
        del model
        _free_cuda()
    gaps = {f"{name}_vs_sdpa_padded_max_abs_logprob_diff": float((v - lp["sdpa_padded"])[mask].abs().max())
            for name, v in lp.items() if name != "sdpa_padded"}
    if device == "cuda":  # bf16: within its rounding; sdpa alone on a node without flash-attn (gpu_bare.py)
        out = {**gaps, "attention_ok": gaps["sdpa_packed_vs_sdpa_padded_max_abs_logprob_diff"] < 0.1}
        flash = [v for k, v in gaps.items() if k.startswith("flash")]
        return {**out, "flash_attn_ok": max(flash) < 0.1} if flash else out
    return {**gaps, "attention_ok": max(gaps.values()) < 1e-4}


# --- 2. prompt tokens (vLLM) ------------------------------------------------------------------------


def check_prompt_tokens(ctx: argparse.Namespace) -> dict:
    """The ids vLLM ran for the prompt equal the trainer's, video tokens included."""
    from evr1.engines import make_engine

    model_dir = base_model(ctx.workdir, ctx.family, ctx.smoke)
    engine = make_engine("vllm", model_dir=str(model_dir), **VLLM_OPTIONS)
    prompt = video_prompt(model_dir, probe_video(ctx.workdir, ctx.smoke))
    out = engine.llm.generate([engine._request(prompt)], engine._sampling_params(_greedy()), use_tqdm=False)[0]
    ran, ours = list(out.prompt_token_ids), list(prompt.input_ids)
    first = next((k for k, (a, b) in enumerate(zip(ran, ours)) if a != b), None if len(ran) == len(ours) else min(len(ran), len(ours)))
    return {"prompt_tokens_equal": ran == ours, "prompt_tokens": len(ours), "vllm_prompt_tokens": len(ran),
            "first_difference": first}


# --- 3. GRPO through the stages, then cached frames -------------------------------------------------


def grpo_overrides(family: str, model_dir: Path, root: Path, steps: int, *, engine: str, smoke: bool) -> list[str]:
    """`conf/tiny.yaml` overrides of the GRPO check. vLLM: bf16 on CUDA, the engine colocated with the one
    rank (`rollout.placement` auto) at a third of the GPU, asleep while the rank trains; HF: fp32 on the CPU.
    Tracking off: the figures come from the trainer's history (the GPU image has MLflow's client only)."""
    device, dtype = ("cuda", "bfloat16") if engine == "vllm" else ("cpu", "float32")
    sizes = (["trainer.prompts_per_step=2", "rollout.n=2", "rollout.max_new_tokens=4", "data.synth.n=4",
              "data.synth.heldout=1", "cache.workers=1"] if smoke else
             ["trainer.prompts_per_step=4", "rollout.n=4", "rollout.max_new_tokens=64", "data.synth.n=16",
              "data.synth.heldout=2"])
    vllm = [f'rollout.vllm={json.dumps(VLLM_OPTIONS)}'] if engine == "vllm" else []
    return [f"run.root={root}", f"run.name=gpu-smoke-{family}", f"model.path={model_dir}", f"model.dtype={dtype}",
            f"rollout.engine={engine}", f"trainer.device={device}", "trainer.world_size=1", f"trainer.steps={steps}",
            "trainer.warmup_sft_steps=0", "trainer.val_every=0", "trainer.resume=false", "tracking.enabled=false",
            *sizes, *vllm, "eval.enabled=false"]


def check_grpo(ctx: argparse.Namespace) -> dict:
    """A few GRPO steps through the stages, the merge, and the cached-frames check on the merged model."""
    import torch

    from evr1 import pipeline
    from evr1.config import load_config
    from evr1.data.ingest import read_samples
    from evr1.train.merge import merge_checkpoint
    from evr1.train.trainer import train

    base = base_model(ctx.workdir, ctx.family, ctx.smoke)
    cfg = load_config(ROOT / "conf" / "tiny.yaml", grpo_overrides(ctx.family, base, ctx.workdir / "runs", ctx.steps,
                                                                 engine=ctx.engine, smoke=ctx.smoke))
    t0 = time.perf_counter()
    samples = pipeline.stage_ingest(cfg)
    model = pipeline.stage_model(cfg)
    frames = pipeline.stage_cache(cfg, samples, model)
    rows = read_samples(samples.uri, split="train")
    t_train = time.perf_counter()
    result = train(cfg, samples=rows, frames_uri=frames.uri, model_dir=Path(model.uri),
                   out_dir=ctx.workdir / "runs" / f"ckpt-{ctx.family}")
    train_s = time.perf_counter() - t_train
    merged = ctx.workdir / f"{ctx.family}-merged"
    merge = merge_checkpoint(Path(result.checkpoint), merged, base_model=Path(model.uri), dtype=cfg.model.dtype)
    n = parameters(base)
    out = {"parameters": n, "steps": len(result.history), "grpo_seconds": time.perf_counter() - t0,
           "train_seconds": train_s, "merged": str(merged), "merge_max_logit_diff": merge.max_logit_diff,
           **step_split(result.history)}
    cuda = torch.cuda.is_available() and ctx.engine == "vllm"
    tokens_s = out.get("perf/tokens_per_s_per_device")
    peak = next((v for k, v in PEAK_BF16.items() if cuda and k in torch.cuda.get_device_name(0)), None)
    out["mfu_estimate"] = 6 * n * tokens_s / peak if tokens_s and peak else None
    out["plan_total_gib"] = plan_total_gib(cfg, torch.cuda.get_device_properties(0).total_memory / 2**30 if cuda else 80.0)
    if "perf/rank_peak_device_mb" in out:
        out["peak_device_gib_vs_plan"] = out["perf/rank_peak_device_mb"] / 1024 / out["plan_total_gib"]
    out.update(check_cached_frames(merged, cfg, frames, samples, ctx.engine))
    return out


def step_split(history: list[dict]) -> dict:
    """Per-step medians of the trainer's timings and throughput (`time/*`, `perf/*`), steps after the first
    (the first pays the engine's and the kernels' warm-up) when there are several; the peaks are maxima."""
    rows = history[1:] if len(history) > 1 else history
    out: dict = {}
    for key in sorted({k for h in rows for k in h}):
        values = [h[key] for h in rows if isinstance(h.get(key), (int, float))]
        if values and key.startswith(("time/", "perf/")):
            out[key] = max(values) if "peak" in key else statistics.median(values)
    return out


def plan_total_gib(cfg, gpu_gib: float) -> float | None:
    """`evr1 plan`'s total per GPU (GiB) for `cfg`, the first setup's column."""
    from evr1.train.plan import plan_for_config

    m = re.search(r"total per GPU\s+([\d.]+) GiB", plan_for_config(cfg, gpu_gib=gpu_gib))
    return float(m.group(1)) if m else None


def check_cached_frames(model_dir: Path, cfg, frames, samples, engine: str) -> dict:
    """Frames from the Lance cache equal decoded ones, and greedy generation (vLLM; HF without it) agrees."""
    import numpy as np

    from evr1.cache import FrameReader
    from evr1.data.ingest import read_samples
    from evr1.engines import make_engine
    from evr1.models import load_adapter

    adapter = load_adapter(model_dir)
    params = cfg.cache.frame_params(adapter.family.factor)
    row = next(s for s in read_samples(samples.uri) if s.get("videos"))
    video = row["videos"][0]
    root = cfg.data.data_root
    cached = FrameReader(frames.uri, params, mode="cache-only", data_root=root).video(video)
    decoded = FrameReader(None, params, mode="decode-only", data_root=root).video(video)
    generator = make_engine(engine, model_dir=str(model_dir), **engine_options(engine))
    texts = [generator.generate([adapter.encode_prompt(row["problem"], videos=[clip])], _greedy())[0][0].token_ids
             for clip in (cached, decoded)]
    return {"cached_frames_equal": bool(np.array_equal(cached.frames, decoded.frames)),
            "cached_generation_equal": texts[0] == texts[1]}


# --- 4. weight sync (vLLM) --------------------------------------------------------------------------


def check_weight_sync(ctx: argparse.Namespace) -> dict:
    """vLLM on the base weights, synced to the trained ones, scores a fixed text the same as the trained
    model in transformers (bf16 tolerance), and differently before the sync."""
    import torch
    from transformers import AutoModelForImageTextToText
    from vllm import SamplingParams as VllmSampling

    from evr1.engines import make_engine
    from evr1.models import load_adapter

    base = base_model(ctx.workdir, ctx.family, ctx.smoke)
    trained = Path(ctx.previous["merged"])
    adapter = load_adapter(trained)
    ids = adapter.tokenizer.encode("The answer is <answer>A</answer> because the red circle moves left.")
    hf = AutoModelForImageTextToText.from_pretrained(str(trained), dtype=torch.bfloat16).cuda().eval()
    with torch.no_grad():
        logits = hf(input_ids=torch.tensor([ids], device="cuda")).logits.float()[0]
    reference = torch.log_softmax(logits, -1)[torch.arange(len(ids) - 1), torch.tensor(ids[1:])].cpu()
    state = {k: v.to("cuda") for k, v in hf.state_dict().items()}
    del hf, logits
    engine = make_engine("vllm", model_dir=str(base), **VLLM_OPTIONS)

    def vllm_logprobs(engine) -> torch.Tensor:
        out = engine.llm.generate([{"prompt_token_ids": ids}], VllmSampling(max_tokens=1, prompt_logprobs=0),
                                  use_tqdm=False)[0]
        return torch.tensor([out.prompt_logprobs[k + 1][ids[k + 1]].logprob for k in range(len(ids) - 1)])

    before = (vllm_logprobs(engine) - reference).abs().max().item()
    t0 = time.perf_counter()
    engine.update_weights(state)
    sync_s = time.perf_counter() - t0
    after = (vllm_logprobs(engine) - reference).abs().max().item()
    return {"sync_max_abs_logprob_diff_before": before, "sync_max_abs_logprob_diff_after": after,
            "sync_seconds_whole_state_dict": sync_s, "sync_ok": after < 0.1 < before}


# --- 5-6. the suite runner --------------------------------------------------------------------------


def suite_items(ctx: argparse.Namespace):
    """(items, load) of the suite comparison: `--items` synthetic videos, decoded on the fly."""
    from evr1.cache import FrameReader
    from evr1.data import make_synthetic
    from evr1.models import load_adapter
    from evr1.video.clip import FrameParams

    folder = ctx.workdir / "suite"
    if not (folder / "train.jsonl").exists():
        make_synthetic(folder, ctx.items, heldout=0, image_fraction=0.0, seconds=1.0 if ctx.smoke else 4.0)
    rows = [json.loads(line) for line in (folder / "train.jsonl").read_text().splitlines()]
    items = [{"id": r["problem_id"], "problem": r["problem"], "video": str(folder / r["videos"][0])} for r in rows]
    adapter = load_adapter(base_model(ctx.workdir, ctx.families[0], ctx.smoke))
    reader = FrameReader(None, FrameParams(factor=adapter.family.factor), mode="decode-only")

    def load(item):
        return adapter.encode_prompt(item["problem"], videos=[reader.video(item["video"])])
    return items, load


def check_suite_sync(ctx: argparse.Namespace) -> dict:
    """Load a batch, then generate it (the way lmms-eval runs): items/s and the engine's idle share."""
    from evr1.engines import make_engine

    items, load = suite_items(ctx)
    batch = 4 if ctx.smoke else 16
    sync = make_engine(ctx.engine, model_dir=str(base_model(ctx.workdir, ctx.families[0], ctx.smoke)),
                       **engine_options(ctx.engine))
    sync.generate([load(items[0])], _greedy())  # warm-up
    t0, loading = time.perf_counter(), 0.0
    for start in range(0, len(items), batch):
        t = time.perf_counter()
        prompts = [load(i) for i in items[start:start + batch]]
        loading += time.perf_counter() - t
        sync.generate(prompts, _greedy())
    sync_s = time.perf_counter() - t0
    return {"suite_items": len(items), "sync_items_per_s": len(items) / sync_s, "sync_engine_idle": loading / sync_s}


def check_suite_async(ctx: argparse.Namespace) -> dict:
    """The suite runner on the asynchronous engine (vLLM's AsyncLLM; HF on the CPU), 4 benchmarks."""
    from evr1.engines import make_engine
    from evr1.eval import ResultStore
    from evr1.eval.runner import SuiteJob, run_suite

    items, load = suite_items(ctx)
    suite = make_engine(ctx.engine, model_dir=str(base_model(ctx.workdir, ctx.families[0], ctx.smoke)),
                        asynchronous=True, **engine_options(ctx.engine))
    jobs = [SuiteJob(benchmark=f"b{j}", items=items[j::4], load=load, score=lambda text, item: {"score": 0.0},
                     store=ResultStore(ctx.workdir / "suite-results" / f"b{j}.jsonl")) for j in range(4)]
    t0 = time.perf_counter()
    summaries = asyncio.run(run_suite(jobs, engine=suite, sampling=_greedy(), concurrency=8, queue_size=64,
                                      batch_size=4 if ctx.smoke else 16, timeout_s=600.0))
    suite_s = time.perf_counter() - t0
    return {"suite_items_per_s": len(items) / suite_s,
            "suite_engine_idle": next(iter(summaries.values())).engine_wait_fraction,
            "suite_failed": sum(s.failed for s in summaries.values())}


RUN = {"imports": check_imports, "prompt_tokens": check_prompt_tokens, "grpo": check_grpo,
       "weight_sync": check_weight_sync, "suite_sync": check_suite_sync, "suite_async": check_suite_async}


# --- the driver: each check in a process of its own -------------------------------------------------


def _result_path(work: Path, check: str, family: str | None) -> Path:
    return work / "results" / (f"{check}.{family}.json" if family else f"{check}.json")


def run_check(ctx: argparse.Namespace) -> int:
    """In this (child) process: one check; its figures go to its result file."""
    need = NEEDS.get(ctx.check)
    ctx.previous = json.loads(_result_path(ctx.workdir, need, ctx.family).read_text()) if need else {}
    out = RUN[ctx.check](ctx)
    path = _result_path(ctx.workdir, ctx.check, ctx.family)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(out, default=str))
    return 0


def _spawn(args: argparse.Namespace, work: Path, check: str, family: str | None, engine: str) -> tuple[dict, dict]:
    """(the check's figures or its error, the row of the run's log) of one check in a fresh process."""
    cmd = [sys.executable, str(Path(__file__).resolve()), "--check", check, "--workdir", str(work),
           "--engine", engine, "--steps", str(args.steps), "--items", str(args.items),
           "--families", *args.families, *(["--family", family] if family else []),
           *(["--smoke"] if args.smoke else []), *(["--no-flash-attn"] if args.no_flash_attn else [])]
    t0 = time.perf_counter()
    # The child's own output (progress, engine logs) goes to stderr: stdout carries this script's JSON lines.
    proc = subprocess.run(cmd, stdout=sys.stderr, stderr=subprocess.PIPE, text=True, timeout=args.check_timeout,
                          check=False)
    seconds = round(time.perf_counter() - t0, 1)
    sys.stderr.write(proc.stderr[-20000:])
    path = _result_path(work, check, family)
    if proc.returncode == 0 and path.exists():
        result = json.loads(path.read_text())
    else:
        result = {"error": f"exit {proc.returncode}: " + (proc.stderr.strip().splitlines() or ["(no output)"])[-1][:500]}
    return result, {"check": check, "family": family, "seconds": seconds, "rc": proc.returncode}


def drive(args: argparse.Namespace, work: Path) -> dict:
    """Every check in order, each in its own process; the run's one JSON."""
    log: list[dict] = []
    imports, row = _spawn(args, work, "imports", None, "none")
    log.append(row)
    cuda = bool(imports.get("cuda"))
    if not args.smoke and not cuda:
        sys.exit("gpu_smoke: no CUDA device (run it on a GPU node, e.g. in the evr1-gpu image)")
    engine = "vllm" if cuda and imports.get("vllm") and not args.cpu else "hf"
    results: dict = {"device": {"gpu": imports.get("gpu"), "torch": imports.get("torch"), "engine": engine,
                                "smoke": args.smoke}, "imports": imports}
    print(json.dumps({"imports": imports}), flush=True)
    for family in args.families:
        r: dict = {}
        for check in PER_FAMILY:
            if check in VLLM_ONLY and engine != "vllm":
                r.setdefault("skipped", f"{', '.join(VLLM_ONLY)}: vLLM's own checks (no CUDA or no vLLM here)")
                continue
            if check in NEEDS and "error" in r.get(NEEDS[check], {}):
                r[check] = {"error": f"skipped: {NEEDS[check]} failed"}
                continue
            out, row = _spawn(args, work, check, family, engine)
            log.append(row)
            r[check] = out
        figures = {k: v for check in PER_FAMILY for k, v in r.get(check, {}).items()}
        figures.update({f"{c}_error": r[c]["error"] for c in PER_FAMILY if "error" in r.get(c, {})})
        if "skipped" in r:
            figures["skipped"] = r["skipped"]
        results[family] = figures
        print(json.dumps({family: figures}), flush=True)
    suite: dict = {}
    for check in ("suite_sync", "suite_async"):
        out, row = _spawn(args, work, check, None, engine)
        log.append(row)
        suite.update({f"{check}_error": out["error"]} if "error" in out else out)
    results["suite"] = suite
    print(json.dumps({"suite": suite}), flush=True)
    results["checks"] = log
    results["ok"] = _ok(results, engine, cuda, args)
    return results


def _ok(results: dict, engine: str, cuda: bool, args) -> bool:
    keys = ("prompt_tokens_equal", "sync_ok", "cached_frames_equal", "cached_generation_equal")
    ok = all(row["rc"] == 0 for row in results["checks"])
    ok = ok and all(results[f].get(k, True) for f in args.families for k in keys)
    ok = ok and results["suite"].get("suite_failed", 1) == 0
    if cuda and engine == "vllm" and not args.no_flash_attn:  # the image builds flash-attn: it must work
        ok = ok and results["imports"].get("flash_attn_ok") is True
    ok = ok and results["imports"].get("attention_ok", True) is not False  # CPU: sdpa packed = padded
    return bool(ok)


def markdown(results: dict, families: list[str]) -> str:
    lines = ["| check | " + " | ".join(families) + " |", "| --- |" + " ---: |" * len(families)]
    keys = sorted({k for f in families for k in results[f]})
    lines += [f"| {k} | " + " | ".join(str(results[f].get(k, "")) for f in families) + " |" for k in keys]
    lines += ["", "| imports | value |", "| --- | ---: |"] + [f"| {k} | {v} |" for k, v in results["imports"].items()]
    lines += ["", "| suite | value |", "| --- | ---: |"] + [f"| {k} | {v} |" for k, v in results["suite"].items()]
    lines += ["", "| check | family | seconds | exit |", "| --- | --- | ---: | ---: |"]
    lines += [f"| {r['check']} | {r['family'] or ''} | {r['seconds']} | {r['rc']} |" for r in results["checks"]]
    return f"GPU: {results['device']}\n\n" + "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--families", nargs="+", default=["qwen2_5_vl", "qwen3_vl"])
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--items", type=int, default=64, help="synthetic videos for the suite comparison")
    p.add_argument("--json", type=Path, default=None, help="write every figure as one JSON here")
    p.add_argument("--out", type=Path, default=None, help="also write the results as markdown here")
    p.add_argument("--workdir", type=Path, default=None, help="models, data and runs (default: a temporary folder)")
    p.add_argument("--check-timeout", type=int, default=3600, help="seconds each check's process may take")
    p.add_argument("--no-flash-attn", action="store_true", help="do not require flash-attn (an image without it)")
    p.add_argument("--smoke", action="store_true",
                   help="smallest sizes (tiny model, first family, 1 step, 8 items); without CUDA or vLLM, "
                        "the checks that need neither, on the HF engine on the CPU")
    p.add_argument("--cpu", action="store_true", help="--smoke on the HF engine on the CPU even where CUDA and vLLM are")
    p.add_argument("--check", choices=CHECKS, help=argparse.SUPPRESS)  # a child: run this one check
    p.add_argument("--family", help=argparse.SUPPRESS)
    p.add_argument("--engine", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    args.smoke = args.smoke or args.cpu
    if args.smoke:
        args.families, args.steps, args.items = args.families[:1], 1, 8
        args.check_timeout = min(args.check_timeout, 900)
    if args.check:
        args.workdir = args.workdir.resolve()
        return run_check(args)
    with tempfile.TemporaryDirectory(prefix="gpu-smoke-") as tmp:
        work = (args.workdir or Path(tmp)).resolve()
        work.mkdir(parents=True, exist_ok=True)
        results = drive(args, work)
    if args.json:
        args.json.write_text(json.dumps(results, indent=1, default=str) + "\n")
    if args.out:
        args.out.write_text(markdown(results, args.families))
    print(json.dumps({"ok": results["ok"]}))
    return 0 if results["ok"] else 1


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    sys.exit(main())
