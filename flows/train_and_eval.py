"""The whole DAG: ingest → cache → train → merge → eval, one MLflow parent run per flow run.

Run it with `evr1 run conf/tiny.yaml`, or deploy it (`prefect deploy --all`, see prefect.yaml) and
start it with `prefect deployment run 'train-and-eval/tiny'`.
"""

from __future__ import annotations

from prefect import flow, get_run_logger

from evr1.config import load_config
from evr1.results import StageResult
from tasks import stages


@flow(name="train-and-eval", persist_result=True, log_prints=True)
def train_and_eval(config: str = "conf/tiny.yaml", overrides: list[str] | None = None) -> dict[str, StageResult]:
    """Train a model with GRPO on the configured data and evaluate the merged result."""
    cfg = load_config(config, overrides or [])
    log = get_run_logger()
    samples = stages.ingest(cfg)
    base = stages.model(cfg)
    frames = stages.cache(cfg, samples, base)
    ckpt = stages.train(cfg, samples, frames, base)
    merged = stages.merge(cfg, ckpt, base)
    results = {"ingest": samples, "model": base, "cache": frames, "train": ckpt, "merge": merged}
    if cfg.eval.enabled:
        evals = [stages.evaluate(cfg, merged, samples, frames, name) for name in cfg.eval.benchmarks]
        results["eval"] = evals[0]
        results.update({f"eval-{name}": r for name, r in zip(cfg.eval.benchmarks, evals)})
        stages.report(cfg, merged, evals)
    for r in results.values():
        log.info(r.summary())
    return results
