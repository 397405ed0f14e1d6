"""The eval stage: a model directory and benchmarks → per-item results, the official metric, a table each.

A suite of benchmarks runs through one engine (`evaluate_suite`); `evaluate` is the suite of one."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import asdict, replace
from pathlib import Path

from evr1.eval import aio
from evr1.cache import FrameReader
from evr1.config import Config
from evr1.engines import Engine, SamplingParams, make_engine
from evr1.engines.pool import EnginePool
from evr1.eval.benchmark import Benchmark, PromptContext
from evr1.eval.report import summary_table
from evr1.eval.runner import EvalSummary, SuiteJob, run_suite, summarise
from evr1.eval.store import ResultStore
from evr1.models import load_adapter
from evr1.models.runtime import configured_dtype


def evaluate(cfg: Config, bench: Benchmark, items: list[dict], *, model_dir: Path, frames_uri: str | None,
             out_dir: Path, engine: Engine | None = None) -> EvalSummary:
    """Run `bench` on `items` with the model in `model_dir`; results land in `out_dir/<bench>/`.

    Prompts follow `eval.profile` and the model family's style; frames come from the Lance cache
    when present (a miss decodes with the same rules); open-ended items go to the LLM judge when
    `eval.judge.enabled`. Without `engine`, one is built from `cfg.rollout.engine` (see `open_engine`).
    The suite of one: `evaluate_suite` runs several benchmarks through one engine.
    """
    return evaluate_suite(cfg, [(bench, items, frames_uri)], model_dir=model_dir, out_dir=out_dir,
                          engine=engine)[bench.name]


def evaluate_suite(cfg: Config, suite: Sequence[tuple[Benchmark, list[dict], str | None]], *, model_dir: Path,
                   out_dir: Path, engine: Engine | None = None,
                   on_result: Callable[[str, dict], None] | None = None) -> dict[str, EvalSummary]:
    """Run every `(benchmark, items, frames_uri)` of `suite` through ONE engine; a summary per benchmark.

    The engine is built (or its Ray actor started, the model loaded, vLLM warmed up) once for the
    whole suite, and the items of all benchmarks are fed to it from one bounded queue, so it never
    waits between benchmarks. Results, resumption by item id and each benchmark's files under
    `out_dir/<bench>/` are exactly those of `evaluate` per benchmark.
    """
    e = cfg.eval
    adapter = load_adapter(model_dir)
    jobs = [suite_job(cfg, bench, items[: e.limit] if e.limit is not None else items, frames_uri=frames_uri,
                      adapter=adapter, out_dir=out_dir) for bench, items, frames_uri in suite]
    sampling = SamplingParams(n=1, max_new_tokens=e.max_new_tokens, temperature=e.temperature, top_p=e.top_p,
                              top_k=max(0, e.top_k), seed=cfg.run.seed, presence_penalty=e.presence_penalty,
                              stop=tuple(e.stop))
    close: Callable[[], None] = lambda: None
    if engine is None:
        engine, close = open_engine(cfg, model_dir)
    try:
        summaries = aio.run(run_suite(jobs, engine=engine, sampling=sampling, concurrency=e.concurrency,
                                          queue_size=e.queue_size, batch_size=e.batch_size, timeout_s=e.timeout_s,
                                          on_result=on_result))
    finally:
        close()
    benches = {bench.name: bench for bench, _, _ in suite}
    for job in jobs:
        bench, items, store = benches[job.benchmark], list(job.items), job.store
        summary = summaries[bench.name]
        if e.judge.enabled and any(bench.needs_judge(i) or (store.results.get(str(i["id"])) or {}).get("undecided")
                                   for i in items):  # open-ended items, and answers the rule stage left undecided
            summary = judge_pass(cfg, bench, items, store, model_dir, summary)
        pending = sum(1 for i in items
                      if (r := store.results.get(str(i["id"]))) and r.get("needs_judge") and not r.get("judged"))
        if pending:  # counted as wrong until a judge decides them: say so beside the score
            summary.parts["judge/awaiting"] = float(pending)
        write_summary(Path(out_dir) / bench.name, summary, reference_model=e.reference_model)
        summaries[bench.name] = summary
    return summaries


def suite_job(cfg: Config, bench: Benchmark, items: list[dict], *, frames_uri: str | None, adapter,
              out_dir: Path) -> SuiteJob:
    """How the runner loads, scores and stores `bench`'s items: its frames reader, prompts and result file."""
    e = cfg.eval
    params = cfg.cache.frame_params(adapter.family.factor)
    root = video_root(cfg, bench)
    mode = cfg.cache.mode if cfg.cache.enabled else "decode-only"
    if not frames_uri:
        if mode == "cache-only":
            raise ValueError(f"{bench.name}: cache.mode is cache-only but there is no frames table to read; build one "
                             "with `evr1 cache <config> --benchmarks` (or set eval.frames_uri)")
        mode = "decode-only"
    reader = FrameReader(frames_uri, params, mode=mode, data_root=root)
    ctx = PromptContext(profile=e.profile, family=prompt_family(e.family, adapter.family.name), thinking=e.thinking,
                        template=cfg.rollout.template)

    def load(item):
        c = ctx
        if e.subtitles and bench.subtitles is not None and root is not None:
            c = replace(ctx, subtitles=bench.subtitles(item, Path(root)))
        p = bench.prompted(item, c)
        segments = list(p.segments) or [None] * len(p.videos)
        videos = [reader.video(v, start=seg[0], end=seg[1]) if seg else reader.video(v)
                  for v, seg in zip(p.videos, segments)]
        return adapter.encode_prompt(p.text, videos=videos, images=[reader.image(i) for i in p.images])

    store = ResultStore(Path(out_dir) / bench.name / "results.jsonl")
    return SuiteJob(benchmark=bench.name, items=items, load=load, store=store, group_key=bench.group_key,
                    score=lambda text, item: bench.score_item(text, item, e.profile),
                    aggregate=lambda pairs: bench.report(pairs, e.profile), profile=e.profile)


def judge_pass(cfg: Config, bench: Benchmark, items: list[dict], store: ResultStore, model_dir: Path,
               summary: EvalSummary) -> EvalSummary:
    """The LLM judge's second pass over open-ended items, then the summary again with its verdicts."""
    from evr1.eval.judge import run_judge

    j = cfg.eval.judge
    judge_dir = Path(j.model_path or model_dir)
    engine, close = open_engine(cfg, judge_dir, engine_name=j.engine, batch_size=j.batch_size)
    try:
        counts = run_judge(j, bench, items, store, default_model_dir=model_dir, device=cfg.trainer.device,
                           concurrency=cfg.eval.concurrency, timeout_s=cfg.eval.timeout_s, engine=engine,
                           dtype=configured_dtype(cfg.model, cfg.trainer.device))
    finally:
        close()
    again = summarise(items, store, benchmark=bench.name, group_key=bench.group_key,
                      aggregate=lambda pairs: bench.report(pairs, cfg.eval.profile), profile=cfg.eval.profile,
                      seconds=summary.seconds, engine_wait=0.0, engine_busy=0.0)
    again.engine_wait_fraction = summary.engine_wait_fraction
    again.parts.update({f"judge/{k}": float(v) for k, v in counts.items()})
    return again


def write_summary(folder: Path, summary: EvalSummary, *, reference_model: str | None = None) -> None:
    """`summary.json` and the markdown `table.md` (headline, breakdowns, the reference beside it)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "summary.json").write_text(json.dumps(asdict(summary), indent=2))
    (folder / "table.md").write_text(summary_table(summary, reference_model=reference_model))


def prompt_family(setting: str, model_family: str) -> str:
    """The prompt style: "qwen25" for Qwen2/2.5-VL, "qwen3" for Qwen3-VL and Qwen3.5 (unless set)."""
    if setting != "auto":
        return setting
    return "qwen25" if model_family in ("qwen2_vl", "qwen2_5_vl") else "qwen3"


def video_root(cfg: Config, bench: Benchmark) -> str | None:
    """Where `bench`'s relative media paths live: `eval.video_roots[name]`, else `eval.data_dir/<video_root>`;
    the held-out split uses `data.data_root`. Paths are confined to this folder."""
    e = cfg.eval
    if bench.extra.get("single_profile"):
        return cfg.data.data_root
    if bench.name in e.video_roots:
        return e.video_roots[bench.name]
    if e.data_dir is None:
        raise ValueError(f"benchmark {bench.name!r}: set eval.data_dir (the folder holding {bench.video_root or bench.name}/) "
                         f"or eval.video_roots.{bench.name}")
    return str(Path(e.data_dir) / bench.video_root)


def suite_problems(cfg: Config) -> list[str]:
    """What would stop `eval.benchmarks` from loading, one line each, checked before any stage runs: an
    unknown name, an annotation file that is not there, a benchmark without a video folder. Without it
    a missing `mvbench.json` is found after training, by the eval stage. (Here, not in
    evr1.config.preflight: the registry imports the model code, seconds that `evr1 run`'s first
    process does not spend; the flow's process has it loaded.)"""
    from evr1.eval.benchmark import get_benchmark

    e, problems = cfg.eval, []
    for i, name in enumerate(e.benchmarks if e.enabled else []):
        key = f"eval.benchmarks[{i}]={name}"
        try:
            bench = get_benchmark(name)
        except KeyError as exc:
            problems.append(f"{key}: {exc.args[0]}")
            continue
        if bench.extra.get("single_profile") or bench.load_fn is not None:
            continue  # the run's own held-out split, or a loader of its own
        if name not in e.files:  # eval.files.<name> is checked by evr1.config.preflight
            try:
                bench.find(e.annotations_dir)
            except (ValueError, FileNotFoundError) as exc:
                problems.append(f"{key}: {exc} (set eval.annotations_dir or eval.files.{name})")
        try:
            video_root(cfg, bench)
        except ValueError as exc:
            problems.append(f"{key}: {exc}")
    return problems


def load_items(cfg: Config, bench: Benchmark, samples_uri: str | None = None) -> list[dict]:
    """The benchmark's items: the held-out split of `samples_uri`, or its annotation file."""
    if bench.extra.get("single_profile"):
        return bench.load(samples_uri)
    return bench.load(cfg.eval.files.get(bench.name), annotations_dir=cfg.eval.annotations_dir)


def open_engine(cfg: Config, model_dir: Path, *, engine_name: str | None = None,
                batch_size: int | None = None) -> tuple[Engine, Callable[[], None]]:
    """The engine `engine_name` (default `cfg.rollout.engine`) on `model_dir`, and how to release it.

    "hf" runs in this process on `cfg.trainer.device`. Any other engine runs in a Ray actor
    (`EngineWorker`), because this may be the Prefect flow's process, which has no vLLM; vLLM runs
    there as AsyncLLM, and the runner keeps `eval.concurrency` requests in flight. With
    `eval.engines > 1` that many replicas (each on `eval.tensor_parallel` GPUs) serve one `EnginePool`.
    """
    name, batch = engine_name or cfg.rollout.engine, batch_size or cfg.eval.batch_size
    replicas = cfg.eval.engines if engine_name is None else 1
    if name == "hf":
        devices = [cfg.trainer.device] * replicas
        if cfg.trainer.device == "cuda" and replicas > 1:
            devices = [f"cuda:{k}" for k in range(replicas)]
        dtype = configured_dtype(cfg.model, cfg.trainer.device)
        engines = [make_engine("hf", model_dir=str(model_dir), batch_size=batch, dtype=dtype, device=d) for d in devices]
        return (engines[0], lambda: None) if replicas == 1 else (EnginePool(engines), lambda: None)
    from evr1.engines.remote import remote_engine
    from evr1.cluster.connect import ensure_ray

    o = cfg.orchestration
    ensure_ray(o.ray_address, num_cpus=o.ray_num_cpus, object_store_mb=o.ray_object_store_mb)
    tp = cfg.eval.tensor_parallel if cfg.eval.tensor_parallel > 1 else cfg.rollout.vllm.tensor_parallel_size
    # vLLM's options are the rollout's (`rollout.vllm`); eval.tensor_parallel > 1 overrides its GPU count.
    options = {**cfg.rollout.vllm.engine_options(), "tensor_parallel_size": tp, "seed": cfg.run.seed,
               "logprobs_mode": "raw_logprobs"} if name == "vllm" else ({"tensor_parallel_size": tp} if tp > 1 else {})
    started = []
    try:
        for _ in range(replicas):
            started.append(remote_engine(model_dir, name, batch_size=batch, asynchronous=True,
                                         dtype=configured_dtype(cfg.model, cfg.trainer.device),
                                         num_gpus=tp if cfg.trainer.device == "cuda" else 0, **options))
    except BaseException:
        for r in started:
            r.shutdown()
        raise

    def close() -> None:
        for r in started:
            r.shutdown()

    return (started[0], close) if replicas == 1 else (EnginePool(started, close=close), close)
