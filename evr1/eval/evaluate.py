"""The eval stage: a model directory and a benchmark → per-item results, a summary and a table."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path

from evr1.cache import FrameReader
from evr1.config import Config
from evr1.engines import Engine, SamplingParams, make_engine
from evr1.eval.benchmark import Benchmark
from evr1.eval.runner import EvalSummary, run_items
from evr1.eval.store import ResultStore
from evr1.models import load_adapter


def evaluate(cfg: Config, bench: Benchmark, items: list[dict], *, model_dir: Path, frames_uri: str | None,
             out_dir: Path, engine: Engine | None = None) -> EvalSummary:
    """Run `bench` on `items` with the model in `model_dir`; results land in `out_dir/<bench>/`.

    Without `engine`, one is built from `cfg.rollout.engine` (see `open_engine`) and shut down at the end.
    """
    e = cfg.eval
    if e.limit is not None:
        items = items[: e.limit]
    adapter = load_adapter(model_dir)
    params = cfg.cache.frame_params(adapter.family.factor)
    mode = cfg.cache.mode if (cfg.cache.enabled and frames_uri) else "decode-only"
    reader = FrameReader(frames_uri, params, mode=mode, data_root=cfg.data.data_root)
    template = cfg.rollout.template

    def load(item):
        p = bench.prompt(item, e.thinking, template=template)
        return adapter.encode_prompt(p.text, videos=[reader.video(v) for v in p.videos],
                                     images=[reader.image(i) for i in p.images])

    folder = Path(out_dir) / bench.name
    store = ResultStore(folder / "results.jsonl")
    sampling = SamplingParams(n=1, max_new_tokens=e.max_new_tokens, temperature=e.temperature, seed=cfg.run.seed)
    close: Callable[[], None] = lambda: None
    if engine is None:
        engine, close = open_engine(cfg, model_dir)
    try:
        summary = asyncio.run(run_items(items, load=load, engine=engine, score=bench.score, store=store,
                                        sampling=sampling, concurrency=e.concurrency, queue_size=e.queue_size,
                                        batch_size=e.batch_size, timeout_s=e.timeout_s, group_key=bench.group_key,
                                        benchmark=bench.name))
    finally:
        close()
    (folder / "summary.json").write_text(json.dumps(summary.__dict__, indent=2))
    (folder / "table.md").write_text(summary_table(summary))
    return summary


def open_engine(cfg: Config, model_dir: Path) -> tuple[Engine, Callable[[], None]]:
    """The engine `cfg.rollout.engine` on `model_dir`, and how to release it.

    "hf" runs in this process on `cfg.trainer.device`. Any other engine runs in a Ray actor (the
    trainer's rollout worker), because this may be the Prefect flow's process, which has no vLLM.
    """
    e = cfg.eval
    if cfg.rollout.engine == "hf":
        engine = make_engine("hf", model_dir=str(model_dir), batch_size=e.batch_size, dtype=cfg.model.dtype,
                             device=cfg.trainer.device)
        return engine, lambda: None
    from evr1.engines.remote import remote_engine
    from evr1.train.ray_utils import ensure_ray

    o = cfg.orchestration
    ensure_ray(o.ray_address, num_cpus=o.ray_num_cpus, object_store_mb=o.ray_object_store_mb)
    remote = remote_engine(model_dir, cfg.rollout.engine, batch_size=e.batch_size, dtype=cfg.model.dtype,
                           num_gpus=1 if cfg.trainer.device == "cuda" else 0)
    return remote, remote.shutdown


def summary_table(s: EvalSummary) -> str:
    """A markdown table: one row per group plus the overall score and coverage."""
    rows = [f"| {s.benchmark} / {g} | {int(r['n'])} | {100 * r['score']:.1f} |" for g, r in s.by_group.items()]
    return "\n".join([
        f"### {s.benchmark}: {100 * s.score:.1f} ({s.scored}/{s.items} scored, {s.failed} failed)", "",
        "| benchmark / group | items | score (%) |", "| --- | ---: | ---: |", *rows,
        f"| **{s.benchmark} (all)** | {s.items} | **{100 * s.score:.1f}** |", "",
    ])
