"""The eval stage: a model directory and a benchmark → per-item results, a summary and a table."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from evr1.cache import FrameReader
from evr1.config import Config
from evr1.engines import SamplingParams, make_engine
from evr1.eval.benchmark import Benchmark
from evr1.eval.runner import EvalSummary, run_items
from evr1.eval.store import ResultStore
from evr1.models import load_adapter


def evaluate(cfg: Config, bench: Benchmark, items: list[dict], *, model_dir: Path, frames_uri: str | None,
             out_dir: Path, engine=None) -> EvalSummary:
    """Run `bench` on `items` with the model in `model_dir`; results land in `out_dir/<bench>/`."""
    e = cfg.eval
    if e.limit is not None:
        items = items[: e.limit]
    adapter = load_adapter(model_dir)
    params = cfg.cache.frame_params(adapter.family.factor)
    mode = cfg.cache.mode if (cfg.cache.enabled and frames_uri) else "decode-only"
    reader = FrameReader(frames_uri, params, mode=mode, data_root=cfg.data.data_root)
    engine = engine or make_engine(cfg.rollout.engine, model_dir=str(model_dir), batch_size=e.batch_size,
                                   dtype=cfg.model.dtype)

    def load(item):
        p = bench.prompt(item, e.thinking)
        return adapter.encode_prompt(p.text, videos=[reader.video(v) for v in p.videos],
                                     images=[reader.image(i) for i in p.images])

    folder = Path(out_dir) / bench.name
    store = ResultStore(folder / "results.jsonl")
    sampling = SamplingParams(n=1, max_new_tokens=e.max_new_tokens, temperature=e.temperature, seed=cfg.run.seed)
    summary = asyncio.run(run_items(items, load=load, engine=engine, score=bench.score, store=store, sampling=sampling,
                                    concurrency=e.concurrency, queue_size=e.queue_size, batch_size=e.batch_size,
                                    timeout_s=e.timeout_s, group_key=bench.group_key, benchmark=bench.name))
    (folder / "summary.json").write_text(json.dumps(summary.__dict__, indent=2))
    (folder / "table.md").write_text(summary_table(summary))
    return summary


def summary_table(s: EvalSummary) -> str:
    """A markdown table: one row per group plus the overall score and coverage."""
    rows = [f"| {s.benchmark} / {g} | {int(r['n'])} | {100 * r['score']:.1f} |" for g, r in s.by_group.items()]
    return "\n".join([
        f"### {s.benchmark}: {100 * s.score:.1f} ({s.scored}/{s.items} scored, {s.failed} failed)", "",
        "| benchmark / group | items | score (%) |", "| --- | ---: | ---: |", *rows,
        f"| **{s.benchmark} (all)** | {s.items} | **{100 * s.score:.1f}** |", "",
    ])
