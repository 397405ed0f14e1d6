"""One Prefect task per stage. Each calls the plain `evr1.pipeline` function and returns its `StageResult`.

Results are persisted and cached under a key per stage (`evr1.pipeline.stage_key`): the stage's own
config sections, its upstream results' content hashes, its input files, the run folder's token and
the task's source. Retrying a failed flow run re-executes only the stages that did not finish; a
change re-runs exactly the stages it affects (a new eval setting does not retrain); a rebuilt run
folder is never served from the cache. The MLflow parent run is keyed by the flow-run id.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from prefect import runtime, task
from prefect.artifacts import create_markdown_artifact, create_table_artifact
from prefect.cache_policies import TASK_SOURCE, CacheKeyFnPolicy

from evr1 import pipeline
from evr1.config import Config
from evr1.results import StageResult


def _key(stage: str):
    def key(context, parameters) -> str:
        upstream = [v for v in parameters.values() if isinstance(v, StageResult)]
        return pipeline.stage_key(stage, parameters["cfg"], upstream, parameters.get("benchmark"))
    return CacheKeyFnPolicy(cache_key_fn=key)


def _cached(stage: str) -> dict:
    return dict(name=stage, cache_policy=TASK_SOURCE + _key(stage), persist_result=True)


def _run_key() -> str | None:
    return str(runtime.flow_run.id) if runtime.flow_run.id else None


@task(**_cached("ingest"))
def ingest(cfg: Config) -> StageResult:
    """Validate the dataset into Lance samples + rejects."""
    result = pipeline.stage_ingest(cfg, run_key=_run_key())
    create_markdown_artifact(
        key="ingest-report",
        markdown=f"**ingest**: {result.metrics['accepted']:.0f} accepted, {result.metrics['rejected']:.0f} rejected "
                 f"of {result.metrics['read']:.0f} read.\n\nsamples: `{result.uri}`  \nrejects: `{result.extra['rejects_uri']}`",
    )
    return result


@task(**_cached("model"))
def model(cfg: Config) -> StageResult:
    """Resolve the starting model (or build the tiny one)."""
    return pipeline.stage_model(cfg, run_key=_run_key())


@task(name="registered-model", persist_result=True)
def registered_model(cfg: Config, name: str | None = None) -> StageResult:
    """The newest registered model version (never cached: a nightly run must see a new registration)."""
    return pipeline.stage_registered_model(cfg, name)


@task(**_cached("cache"))
def cache(cfg: Config, samples: StageResult, base_model: StageResult) -> StageResult:
    """Decode media into the Lance frame cache."""
    return pipeline.stage_cache(cfg, samples, base_model, run_key=_run_key())


@task(**_cached("train"))
def train(cfg: Config, samples: StageResult, frames: StageResult, base_model: StageResult) -> StageResult:
    """GRPO training on Ray; returns the checkpoint reference."""
    return pipeline.stage_train(cfg, samples, frames, base_model, run_key=_run_key())


@task(**_cached("merge"))
def merge(cfg: Config, checkpoint: StageResult, base_model: StageResult) -> StageResult:
    """Merge the checkpoint into a Hugging Face directory and register it."""
    return pipeline.stage_merge(cfg, checkpoint, base_model, run_key=_run_key())


@task(**_cached("eval"))
def evaluate(cfg: Config, model_dir: StageResult, samples: StageResult, frames: StageResult,
             benchmark: str = "heldout") -> StageResult:
    """Evaluate a model on a benchmark and publish its table (headline metric and breakdowns)."""
    result = pipeline.stage_eval(cfg, model_dir, samples, frames, benchmark, run_key=_run_key())
    summary = json.loads(Path(result.extra["summary"]).read_text())
    rows = [{"part": summary["metric"], "value": round(100 * summary["score"], 2)}]
    rows += [{"part": k, "value": round(100 * v, 2) if not k.startswith("judge/") else v}
             for k, v in summary["parts"].items()]
    rows.append({"part": "coverage", "value": f"{summary['scored']}/{summary['items']} scored, {summary['failed']} failed"})
    create_table_artifact(key=_artifact_key(f"eval-{benchmark}"), table=rows,
                          description=f"{benchmark} ({summary['profile']} profile): {model_dir.uri}")
    return result


@task(name="report", persist_result=True)
def report(cfg: Config, model_dir: StageResult, results: list[StageResult]) -> str:
    """The suite table: every benchmark's headline beside the published numbers for the same model."""
    from evr1.eval.reference import guess_model
    from evr1.eval.report import suite_table
    from evr1.eval.runner import EvalSummary

    summaries = [EvalSummary(**json.loads(Path(r.extra["summary"]).read_text())) for r in results]
    table = suite_table(summaries, reference_model=cfg.eval.reference_model or guess_model(model_dir.uri))
    create_markdown_artifact(key="eval-suite", markdown=table, description=f"evaluation of {model_dir.uri}")
    return table


def _artifact_key(name: str) -> str:
    """Artifact keys allow only lowercase letters, digits and dashes."""
    return re.sub(r"[^a-z0-9-]+", "-", name.lower()).strip("-")
