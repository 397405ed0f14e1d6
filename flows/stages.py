"""One flow per stage, for running or re-running a single stage on its own (from the UI or CLI)."""

from __future__ import annotations

from prefect import flow

from evr1.config import load_config
from evr1.results import StageResult
from tasks import stages


@flow(name="ingest")
def ingest_flow(config: str = "conf/tiny.yaml", overrides: list[str] | None = None) -> StageResult:
    return stages.ingest(load_config(config, overrides or []))


@flow(name="evaluate")
def eval_flow(config: str, model_dir: str, overrides: list[str] | None = None, benchmark: str = "heldout") -> StageResult:
    cfg = load_config(config, overrides or [])
    samples = stages.ingest(cfg)
    base = StageResult(stage="model", uri=model_dir)
    frames = stages.cache(cfg, samples, base)
    return stages.evaluate(cfg, base, samples, frames, benchmark)
