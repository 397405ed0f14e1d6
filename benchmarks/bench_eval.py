"""Eval throughput: the asynchronous runner vs a synchronous load-a-batch-then-generate loop.

Run: .venv/bin/python benchmarks/bench_eval.py [--items 48] [--batch-size 4] [--repeats 3]
     .venv/bin/python benchmarks/bench_eval.py --suite 4 [--items 48]   (one engine vs one per benchmark)

Both loops evaluate the same synthetic videos (`evr1.data.make_synthetic`) with the same tiny
random-weight model on the CPU HF engine, greedy. Frames are decoded on the fly (no cache) and
prompts encoded per item, so loading costs what it costs in a cold eval. The synchronous loop is
how lmms-eval runs: load a batch, then generate it, so the engine idles while loading. The async
runner (`run_items`) loads with `--concurrency` threads while the engine generates.

"engine wait" is the share of the engine's time spent waiting for input: `EvalSummary.
engine_wait_fraction` for the runner, load time / (load + generate time) for the synchronous loop;
"engine busy" is the rest of the wall time, spent generating.
Items/s is the median over `--repeats` runs (the two loops alternate; one warm-up batch first).

`--smoke` runs both comparisons (the two loops, then a 2-benchmark suite) at the smallest sizes (4 videos
of 64x64 and 1 s, batch 2, 2 new tokens, 1 repeat) in seconds: CI runs it (tests/benchmarks) so the
script cannot rot; its figures mean nothing.

`--suite K` splits the items into K benchmarks and compares a suite run through ONE engine
(`run_suite`: the engine is built once, all benchmarks' items share one bounded queue) with one engine
per benchmark (built, run, released in turn, as evaluate did before). Both timings include building
the engine(s) from the model directory, which is what a suite pays per benchmark on a real model.

Generation uses `--torch-threads` (default 1) so the engine stands in for a GPU: it does not take
every core from loading. With one thread per core, an OpenMP team on a busy machine stalls at its
barriers whenever a thread is descheduled, and single generate calls then took up to 10x longer.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shlex
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from evr1.cache import FrameReader  # noqa: E402
from evr1.data import make_synthetic  # noqa: E402
from evr1.engines import SamplingParams, make_engine  # noqa: E402
from evr1.eval import ResultStore, run_items  # noqa: E402
from evr1.eval.runner import SuiteJob, run_suite  # noqa: E402
from evr1.models import load_adapter, make_tiny  # noqa: E402
from evr1.video.clip import FrameParams  # noqa: E402


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--items", type=int, default=48, help="synthetic video questions")
    p.add_argument("--batch-size", type=int, default=4, help="engine batch (both loops)")
    p.add_argument("--repeats", type=int, default=3, help="timed runs per loop (median reported)")
    p.add_argument("--concurrency", type=int, default=2, help="async runner load threads (>= 2)")
    p.add_argument("--max-new-tokens", type=int, default=16)
    p.add_argument("--size", type=int, default=224, help="video width = height, pixels")
    p.add_argument("--seconds", type=float, default=4.0, help="video length")
    p.add_argument("--torch-threads", type=int, default=1,
                   help="torch intra-op threads for generation (0: torch's default, one per core)")
    p.add_argument("--family", default="qwen2_5_vl", choices=["qwen2_vl", "qwen2_5_vl", "qwen3_vl"])
    p.add_argument("--suite", type=int, default=0,
                   help="split the items into this many benchmarks: one engine for the suite vs one per benchmark")
    p.add_argument("--smoke", action="store_true",
                   help="both comparisons at the smallest sizes (4 videos of 64x64, 1 s; batch 2; 1 repeat): seconds")
    args = p.parse_args(argv)
    if args.concurrency < 2:
        p.error("--concurrency must be at least 2")
    if args.smoke:
        args.items, args.batch_size, args.repeats, args.max_new_tokens = 4, 2, 1, 2
        args.size, args.seconds, args.suite = 64, 1.0, 2
    return args


def setup(args: argparse.Namespace, tmp: Path):
    """The tiny model, its engine, the items and the load function (decode + encode, no cache)."""
    model_dir = make_tiny(args.family, tmp / "model", seed=0)
    report = make_synthetic(tmp / "synth", args.items, heldout=0, image_fraction=0.0, size=(args.size, args.size),
                            seconds=args.seconds)
    rows = [json.loads(line) for line in Path(report.train_path).read_text().splitlines()]
    items = [{"id": r["problem_id"], "problem": r["problem"], "video": str(tmp / "synth" / r["videos"][0])} for r in rows]
    adapter = load_adapter(model_dir)
    reader = FrameReader(None, FrameParams(factor=adapter.family.factor), mode="decode-only")

    def load(item):
        return adapter.encode_prompt(item["problem"], videos=[reader.video(item["video"])])

    engine = make_engine("hf", model_dir=str(model_dir), batch_size=args.batch_size, device="cpu")
    args.model_dir = model_dir
    return engine, items, load


def sync_loop(engine, items, load, sampling: SamplingParams, batch_size: int) -> tuple[float, float]:
    """(seconds, engine wait fraction) of load-a-batch-then-generate."""
    t0 = time.perf_counter()
    loading = generating = 0.0
    for start in range(0, len(items), batch_size):
        t = time.perf_counter()
        prompts = [load(item) for item in items[start : start + batch_size]]
        t1 = time.perf_counter()
        engine.generate(prompts, sampling)
        loading += t1 - t
        generating += time.perf_counter() - t1
    return time.perf_counter() - t0, loading / (loading + generating)


def async_loop(engine, items, load, sampling: SamplingParams, args: argparse.Namespace, path: Path) -> tuple[float, float]:
    """(seconds, engine wait fraction) of `run_items`."""
    t0 = time.perf_counter()
    summary = asyncio.run(run_items(items, load=load, engine=engine, score=lambda text, item: {"score": 0.0},
                                    store=ResultStore(path), sampling=sampling, concurrency=args.concurrency,
                                    batch_size=args.batch_size, queue_size=max(16, 2 * args.batch_size),
                                    timeout_s=600.0))
    if summary.failed:
        raise RuntimeError(f"the async runner failed {summary.failed} items: see {path}")
    return time.perf_counter() - t0, summary.engine_wait_fraction


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.torch_threads:
        torch.set_num_threads(args.torch_threads)
    with tempfile.TemporaryDirectory(prefix="bench-eval-") as tmp:
        if args.smoke:  # both comparisons, each in its own folder
            report(args, Path(tmp) / "loops", argv)
            print()
            suite_report(args, Path(tmp) / "suite", argv)
        else:
            (suite_report if args.suite else report)(args, Path(tmp), argv)


def suite_jobs(items, load, k: int, folder: Path) -> list[SuiteJob]:
    """`items` dealt into `k` benchmarks `b0..b{k-1}`, each with its own result file."""
    return [SuiteJob(benchmark=f"b{j}", items=items[j::k], load=load, score=lambda text, item: {"score": 0.0},
                     store=ResultStore(folder / f"b{j}.jsonl")) for j in range(k)]


def suite_once(args: argparse.Namespace, items, load, sampling: SamplingParams, folder: Path,
               one_engine: bool) -> tuple[float, float, int]:
    """(seconds, engine wait fraction, engines built) of the whole suite, engine construction included."""
    build = lambda: make_engine("hf", model_dir=str(args.model_dir), batch_size=args.batch_size, device="cpu")
    knobs = dict(sampling=sampling, concurrency=args.concurrency, batch_size=args.batch_size,
                 queue_size=max(16, 2 * args.batch_size), timeout_s=600.0)
    jobs = suite_jobs(items, load, args.suite, folder)
    t0 = time.perf_counter()
    if one_engine:
        calls = [asyncio.run(run_suite(jobs, engine=build(), **knobs))]
    else:
        calls = [asyncio.run(run_suite([job], engine=build(), **knobs)) for job in jobs]
    seconds = time.perf_counter() - t0
    summaries = [s for call in calls for s in call.values()]
    if any(s.failed for s in summaries):
        raise RuntimeError(f"the suite failed items: see {folder}")
    # Generating time per run_suite call; everything else (building engines, loading with nothing
    # to generate, waiting between benchmarks) is the engine idle.
    busy = sum(max(s.seconds for s in call.values()) * (1 - next(iter(call.values())).engine_wait_fraction)
               for call in calls)
    wait, built = 1 - busy / seconds, len(calls)
    return seconds, wait, built


def suite_report(args: argparse.Namespace, tmp: Path, argv: list[str] | None) -> None:
    """The suite through one engine vs one engine per benchmark, alternating, `--repeats` times."""
    engine, items, load = setup(args, tmp)
    sampling = SamplingParams(n=1, max_new_tokens=args.max_new_tokens, temperature=0.0, seed=0)
    engine.generate([load(i) for i in items[: args.batch_size]], sampling)  # warm-up: file cache, first calls
    del engine
    runs: dict[bool, list[tuple[float, float, int]]] = {True: [], False: []}
    for rep in range(args.repeats):
        for one in (False, True):
            runs[one].append(suite_once(args, items, load, sampling, tmp / f"suite-{rep}-{one}", one))

    def row(one: bool, label: str) -> tuple[str, float]:
        rate = statistics.median(len(items) / s for s, _, _ in runs[one])
        secs = statistics.median(s for s, _, _ in runs[one])
        wait = statistics.median(w for _, w, _ in runs[one])
        return f"| {label} | {runs[one][0][2]} | {rate:.2f} | {secs:.2f} | {100 * wait:.1f} |", rate

    per_row, per_rate = row(False, "one engine per benchmark (built, run, released in turn)")
    one_row, one_rate = row(True, "one engine for the suite (`run_suite`, one queue)")
    command = ".venv/bin/python benchmarks/bench_eval.py " + " ".join(
        shlex.quote(a) for a in (argv if argv is not None else sys.argv[1:]))
    print(f"`{command.strip()}`\n")
    print(f"{args.suite} benchmarks of {len(items) // args.suite} synthetic videos each ({args.size}x{args.size}, "
          f"{args.seconds:g} s), tiny {args.family} on CPU, HF engine ({args.torch_threads or torch.get_num_threads()} "
          f"torch threads), greedy, {args.max_new_tokens} new tokens, batch {args.batch_size}, concurrency "
          f"{args.concurrency}; engine construction included; median of {args.repeats} runs.\n")
    print("| suite run | engines built | items/s | wall s | engine idle (%) |")
    print("| --- | ---: | ---: | ---: | ---: |")
    print(per_row)
    print(one_row)
    print(f"\none engine / one per benchmark throughput: {one_rate / per_rate:.2f}x")


def report(args: argparse.Namespace, tmp: Path, argv: list[str] | None) -> None:
    """Run both loops `--repeats` times and print the table."""
    engine, items, load = setup(args, tmp)
    sampling = SamplingParams(n=1, max_new_tokens=args.max_new_tokens, temperature=0.0, seed=0)
    engine.generate([load(i) for i in items[: args.batch_size]], sampling)  # warm-up: first-call costs, file cache

    runs: dict[str, list[tuple[float, float]]] = {"sync": [], "async": []}
    for rep in range(args.repeats):
        runs["sync"].append(sync_loop(engine, items, load, sampling, args.batch_size))
        runs["async"].append(async_loop(engine, items, load, sampling, args, tmp / f"results-{rep}.jsonl"))

    def row(name: str, label: str) -> tuple[str, float]:
        rate = statistics.median(len(items) / s for s, _ in runs[name])
        wait = statistics.median(w for _, w in runs[name])
        secs = statistics.median(s for s, _ in runs[name])
        busy = statistics.median(s * (1 - w) for s, w in runs[name])
        return f"| {label} | {rate:.1f} | {secs:.2f} | {busy:.2f} | {100 * wait:.1f} |", rate

    sync_row, sync_rate = row("sync", f"synchronous: load a batch, then generate (batch {args.batch_size})")
    async_row, async_rate = row("async", f"async runner `run_items` (concurrency {args.concurrency}, "
                                         f"batch {args.batch_size})")
    command = ".venv/bin/python benchmarks/bench_eval.py " + " ".join(
        shlex.quote(a) for a in (argv if argv is not None else sys.argv[1:]))
    print(f"`{command.strip()}`\n")
    print(f"{len(items)} synthetic videos ({args.size}x{args.size}, {args.seconds:g} s), tiny {args.family} on CPU, "
          f"HF engine ({args.torch_threads or torch.get_num_threads()} torch threads), greedy, "
          f"{args.max_new_tokens} new tokens, frames decoded on the fly; "
          f"median of {args.repeats} runs.\n")
    print("| loop | items/s | wall s | engine busy s | engine wait (%) |")
    print("| --- | ---: | ---: | ---: | ---: |")
    print(sync_row)
    print(async_row)
    print(f"\nasync / sync throughput: {async_rate / sync_rate:.2f}x")


if __name__ == "__main__":
    main()
