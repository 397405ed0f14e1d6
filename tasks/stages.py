"""One Prefect task per stage. Each calls the plain `evr1.pipeline` function and returns its `StageResult`.

Results are persisted and keyed by the stage's inputs (the config, with its absolute run folder,
and the upstream results, which carry content hashes), the task's source and the run folder's
token, so retrying a failed flow run re-executes only the stages that did not finish, and a
deleted run folder is rebuilt rather than served from the cache.
"""

from __future__ import annotations

import json
from pathlib import Path

from prefect import task
from prefect.artifacts import create_markdown_artifact, create_table_artifact
from prefect.cache_policies import INPUTS, TASK_SOURCE, CacheKeyFnPolicy

from evr1 import pipeline
from evr1.config import Config
from evr1.results import StageResult



def _run_folder(context, parameters) -> str:
    """The run folder's token: a deleted and rebuilt run folder never gets a stale cache hit."""
    return pipeline.run_token(parameters["cfg"])


CACHED = dict(cache_policy=INPUTS + TASK_SOURCE + CacheKeyFnPolicy(cache_key_fn=_run_folder), persist_result=True)


@task(name="ingest", **CACHED)
def ingest(cfg: Config) -> StageResult:
    """Validate the dataset into Lance samples + rejects."""
    result = pipeline.stage_ingest(cfg)
    create_markdown_artifact(
        key="ingest-report",
        markdown=f"**ingest**: {result.metrics['accepted']:.0f} accepted, {result.metrics['rejected']:.0f} rejected "
                 f"of {result.metrics['read']:.0f} read.\n\nsamples: `{result.uri}`  \nrejects: `{result.extra['rejects_uri']}`",
    )
    return result


@task(name="model", **CACHED)
def model(cfg: Config) -> StageResult:
    """Resolve the starting model (or build the tiny one)."""
    return pipeline.stage_model(cfg)


@task(name="cache", **CACHED)
def cache(cfg: Config, samples: StageResult, base_model: StageResult) -> StageResult:
    """Decode media into the Lance frame cache."""
    return pipeline.stage_cache(cfg, samples, base_model)


@task(name="train", **CACHED)
def train(cfg: Config, samples: StageResult, frames: StageResult, base_model: StageResult) -> StageResult:
    """GRPO training on Ray; returns the checkpoint reference."""
    return pipeline.stage_train(cfg, samples, frames, base_model)


@task(name="merge", **CACHED)
def merge(cfg: Config, checkpoint: StageResult, base_model: StageResult) -> StageResult:
    """Merge the checkpoint into a Hugging Face directory and register it."""
    return pipeline.stage_merge(cfg, checkpoint, base_model)


@task(name="eval", **CACHED)
def evaluate(cfg: Config, model_dir: StageResult, samples: StageResult, frames: StageResult,
             benchmark: str = "heldout") -> StageResult:
    """Evaluate a model on a benchmark and publish its table."""
    result = pipeline.stage_eval(cfg, model_dir, samples, frames, benchmark)
    summary = json.loads((Path(result.uri) / "summary.json").read_text())
    rows = [{"group": g, "items": int(r["n"]), "score": round(100 * r["score"], 2)} for g, r in summary["by_group"].items()]
    rows.append({"group": "all", "items": summary["items"], "score": round(100 * summary["score"], 2)})
    create_table_artifact(key=f"eval-{benchmark}", table=rows, description=f"{benchmark}: {model_dir.uri}")
    return result
