"""One flow per stage, for running a single stage on its own (from the UI, a deployment or the CLI).

Upstream stages are the same cached tasks the whole DAG uses, so a stage flow reuses what an
earlier run of the same config already produced instead of recomputing it.
"""

from __future__ import annotations

from prefect import flow

from evr1.config import load_config
from evr1.pipeline.results import StageResult
from tasks import stages


@flow(name="ingest", persist_result=True)
def ingest_flow(config: str = "conf/tiny.yaml", overrides: list[str] | None = None) -> StageResult:
    """Validate the dataset into Lance samples + rejects."""
    return stages.ingest(load_config(config, overrides or []))


@flow(name="cache", persist_result=True)
def cache_flow(config: str = "conf/tiny.yaml", overrides: list[str] | None = None) -> StageResult:
    """Decode every sample's media into the Lance frame cache."""
    cfg = load_config(config, overrides or [])
    return stages.cache(cfg, stages.ingest(cfg), stages.model(cfg))


@flow(name="train", persist_result=True)
def train_flow(config: str = "conf/tiny.yaml", overrides: list[str] | None = None) -> StageResult:
    """Train (resuming from the run folder's newest checkpoint); returns the checkpoint reference."""
    cfg = load_config(config, overrides or [])
    samples, base = stages.ingest(cfg), stages.model(cfg)
    return stages.train(cfg, samples, stages.cache(cfg, samples, base), base)


@flow(name="evaluate", persist_result=True)
def eval_flow(config: str, model_dir: str, overrides: list[str] | None = None,
              benchmarks: list[str] | None = None) -> dict[str, StageResult]:
    """Evaluate any Hugging Face model directory on benchmarks (default `eval.benchmarks`) and publish
    the suite table; the run's data is ingested and cached only when its held-out or test split is asked for."""
    from evr1.eval.heldout import uses_run_samples

    cfg = load_config(config, overrides or [])
    names = benchmarks or cfg.eval.benchmarks
    base = StageResult(stage="model", uri=model_dir)
    if uses_run_samples(list(names)):  # the run's held-out or test split
        samples = stages.ingest(cfg)
        frames = stages.cache(cfg, samples, base)
    else:
        samples, frames = StageResult(stage="ingest", uri=""), StageResult(stage="cache", uri="")
    evals = stages.evaluate_suite(cfg, base, samples, frames, list(names))
    stages.report(cfg, base, evals)
    return {f"eval-{name}": r for name, r in zip(names, evals)}
