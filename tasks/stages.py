"""One Prefect task per stage. Each calls the plain `evr1.pipeline` function and returns its `StageResult`.

Results are persisted and cached under a key per stage (`evr1.pipeline.stage_key`): the stage's own
config sections, its upstream results' content hashes, its input files, the run folder's token and
the task's source. Retrying a failed flow run re-executes only the stages that did not finish; a
change re-runs exactly the stages it affects (a new eval setting does not retrain); a rebuilt run
folder is never served from the cache. The MLflow parent run is keyed by the flow-run id.
"""

from __future__ import annotations

import contextlib
import functools
import html
import json
import logging
import os
import re
from datetime import datetime, timezone
from pathlib import Path

from prefect import get_run_logger, runtime, task
from prefect.artifacts import (create_markdown_artifact, create_progress_artifact, create_table_artifact,
                               update_progress_artifact)
from prefect.cache_policies import TASK_SOURCE, CacheKeyFnPolicy

from evr1 import pipeline
from evr1.pipeline import lineage
from evr1.tracking import progress
from evr1.cluster import logs as ray_logs
from evr1.pipeline import summary as run_summary
from evr1.config import Config
from evr1.pipeline.results import StageResult


def _key(stage: str):
    def key(context, parameters) -> str:
        upstream = [v for v in parameters.values() if isinstance(v, StageResult)]
        names = parameters.get("benchmark", parameters.get("benchmarks"))
        return pipeline.stage_key(stage, parameters["cfg"], upstream, list(names) if isinstance(names, tuple) else names)
    return CacheKeyFnPolicy(cache_key_fn=key)


def _cached(stage: str) -> dict:
    return dict(name=stage, cache_policy=TASK_SOURCE + _key(stage), persist_result=True)


def _run_key() -> str | None:
    return str(runtime.flow_run.id) if runtime.flow_run.id else None


class _ArtifactBar:
    """A progress display kept as a Prefect progress artifact of the running flow (0 → 100 %).

    Updates are throttled to one a second (and always at the end); `_sync=True` because the eval
    runner reports from inside its event loop, where Prefect would otherwise hand back a coroutine."""

    def __init__(self, name: str, total: float, unit: str):
        self.name, self.total, self.unit = name, total, unit
        self.id = create_progress_artifact(0.0, key=_artifact_key(f"progress-{name}"),
                                           description=f"{name}: 0/{total:g} {unit}", _sync=True)
        self._push = progress.Throttle(self._send, seconds=1.0)

    def _send(self, done: float, fields: dict) -> None:
        info = progress.describe(fields)
        text = f"{self.name}: {done:g}/{self.total:g} {self.unit}" + (f" · {info}" if info else "")
        update_progress_artifact(self.id, progress=min(100.0, 100.0 * done / self.total), description=text,
                                 _sync=True)

    def update(self, done: float, **fields) -> None:
        self._fields = fields
        self._push(done, fields, force=done >= self.total)

    def close(self, done: float | None = None) -> None:
        if done is not None:  # the last figures (reward, score so far) stay in the description
            self._push(done, getattr(self, "_fields", {}), force=True)


def _flow_run_url(flow_run_id: str) -> str | None:
    from prefect.settings import PREFECT_UI_URL

    ui = PREFECT_UI_URL.value()
    return f"{ui.rstrip('/')}/runs/flow-run/{flow_run_id}" if ui else None


def _logger():
    """The task run's logger (its records reach the flow-run log), or a plain one outside a run."""
    from prefect.exceptions import MissingContextError

    try:
        return get_run_logger()
    except MissingContextError:
        return logging.getLogger("evr1.ray")


def _watched(fn):
    """Run a stage task body with progress artifacts on, Ray worker warnings and errors in the task's log,
    and the flow run's id and URL as lineage tags."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        run_id = _run_key()
        if run_id:
            lineage.set_context({"prefect.flow_run_id": run_id, "prefect.flow_run_url": _flow_run_url(run_id),
                                 "prefect.flow_run_name": runtime.flow_run.name})
        with progress.sinks(_ArtifactBar) if run_id else contextlib.nullcontext(), \
                ray_logs.forwarded(_logger()):
            return fn(*args, **kwargs)
    return wrapper


def forced(stage_task, force: bool | list[str] | None):
    """`stage_task`, refreshed (run again and its cache entry replaced) when `force` is True or names
    its stage: a targeted rerun, without Prefect's global refresh setting."""
    name = stage_task.name
    if force is True or (isinstance(force, (list, tuple, set)) and name in force):
        return stage_task.with_options(refresh_cache=True)
    return stage_task


@task(**_cached("ingest"))
@_watched
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
@_watched
def model(cfg: Config) -> StageResult:
    """Resolve the starting model (or build the tiny one)."""
    return pipeline.stage_model(cfg, run_key=_run_key())


@task(name="registered-model", persist_result=True)
def registered_model(cfg: Config, name: str | None = None) -> StageResult:
    """The newest registered model version (never cached: a nightly run must see a new registration)."""
    return pipeline.stage_registered_model(cfg, name)


@task(**_cached("cache"))
@_watched
def cache(cfg: Config, samples: StageResult, base_model: StageResult) -> StageResult:
    """Decode media into the Lance frame cache."""
    return pipeline.stage_cache(cfg, samples, base_model, run_key=_run_key())


@task(**_cached("train"))
@_watched
def train(cfg: Config, samples: StageResult, frames: StageResult, base_model: StageResult) -> StageResult:
    """GRPO training on Ray; returns the checkpoint reference."""
    return pipeline.stage_train(cfg, samples, frames, base_model, run_key=_run_key(), on_table=_rollout_table)


def _rollout_table(artifact_file: str, rows: list[dict]) -> None:
    """A training table (`rollouts/step_000042.json`, `validation/...`) as a Prefect table artifact: one
    key per kind (`train-rollouts`, `train-validation`), a new version each step."""
    kind, _, name = artifact_file.partition("/")
    create_table_artifact(key=_artifact_key(f"train-{kind}"), table=escaped_cells(rows),
                          description=f"{kind} at step {rows[0]['step']} ({name}): prompt, response, rewards")


@task(**_cached("merge"))
@_watched
def merge(cfg: Config, checkpoint: StageResult, base_model: StageResult) -> StageResult:
    """Merge the checkpoint into a Hugging Face directory and register it."""
    return pipeline.stage_merge(cfg, checkpoint, base_model, run_key=_run_key())


@task(**_cached("eval"))
@_watched
def evaluate(cfg: Config, model_dir: StageResult, samples: StageResult, frames: StageResult,
             benchmark: str = "heldout") -> StageResult:
    """Evaluate a model on a benchmark and publish its table (headline metric and breakdowns)."""
    result = pipeline.stage_eval(cfg, model_dir, samples, frames, benchmark, run_key=_run_key())
    _eval_table(benchmark, result, model_dir)
    return result


@task(**_cached("eval"))
@_watched
def evaluate_suite(cfg: Config, model_dir: StageResult, samples: StageResult, frames: StageResult,
                   benchmarks: list[str]) -> list[StageResult]:
    """Evaluate a model on several benchmarks through one engine; a table per benchmark."""
    results = pipeline.stage_eval_suite(cfg, model_dir, samples, frames, list(benchmarks), run_key=_run_key())
    for name, result in zip(benchmarks, results):
        _eval_table(name, result, model_dir)
    return results


def _eval_table(benchmark: str, result: StageResult, model_dir: StageResult) -> None:
    """The benchmark's table artifact: headline metric, breakdowns, coverage."""
    summary = json.loads(Path(result.extra["summary"]).read_text())
    rows = [{"part": summary["metric"], "value": round(100 * summary["score"], 2)}]
    rows += [{"part": k, "value": round(100 * v, 2) if not k.startswith(("judge/", "undecided")) else v}
             for k, v in summary["parts"].items()]
    rows.append({"part": "coverage", "value": f"{summary['scored']}/{summary['items']} scored, {summary['failed']} failed"})
    create_table_artifact(key=_artifact_key(f"eval-{benchmark}"), table=escaped_cells(rows),
                          description=f"{benchmark} ({summary['profile']} profile): {model_dir.uri}")


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


def escaped_cells(rows: list[dict]) -> list[dict]:
    """Table rows whose text shows as written in the Prefect UI, which renders cells as HTML: a prompt's
    `<video>` placeholder would become an empty video element and `<answer>C</answer>` a bare `C`."""
    return [{k: html.escape(v, quote=False) if isinstance(v, str) else v for k, v in row.items()} for row in rows]


def _artifact_key(name: str) -> str:
    """Artifact keys allow only lowercase letters, digits and dashes."""
    return re.sub(r"[^a-z0-9-]+", "-", name.lower()).strip("-")


class Recorder:
    """Calls the stage tasks of a flow and remembers, per stage, whether it ran in this attempt, came
    from the cache, was finished by an earlier attempt of the same flow run, or failed, and how long
    it took: what the run summary shows."""

    def __init__(self, started: datetime | None = None):
        self.started = started or datetime.now(timezone.utc)
        self.rows: dict[str, dict] = {}

    def __call__(self, name: str, stage_task, *args):
        t0 = datetime.now(timezone.utc)
        # A status line while the stage runs without a bar of its own (ingest, the model, Ray's and the
        # actors' start), and a span of `evr1 run --timings`.
        with progress.phase(name) as span:
            state = stage_task(*args, return_state=True)
            rebuilt = False
            if state.name == "Cached" and (missing := _missing_outputs(state.result())):
                # The cache remembers a result whose files were deleted since: serving it would fail the
                # next stage (and every retry) the same way. Run the stage again and replace the entry.
                get_run_logger().warning(f"{name}: the cached result's output {missing[0]} is gone"
                                         f"{f' (and {len(missing) - 1} more)' if len(missing) > 1 else ''}: "
                                         "running it again")
                state = stage_task.with_options(refresh_cache=True)(*args, return_state=True)
                rebuilt = True
            if state.name == "Cached":
                span.name = f"{name} (from the cache)"
            elif not state.is_completed():
                span.detail["failed"] = True
        seconds = (datetime.now(timezone.utc) - t0).total_seconds()
        if state.name == "Cached":
            status = "cached"
        elif rebuilt and state.is_completed():
            status = "rebuilt"
        elif state.is_completed():
            status = "earlier" if state.timestamp is not None and state.timestamp < self.started else "ran"
        else:
            status = "failed"
        self.rows[name] = {"status": status, "seconds": seconds}
        if status == "failed":
            error = state.result(raise_on_failure=False)
            self.rows[name]["note"] = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        return state.result()  # raises the stage's error when it failed


def _missing_outputs(result: StageResult | list[StageResult]) -> list[str]:
    results = result if isinstance(result, list) else [result]
    return [p for r in results if isinstance(r, StageResult) for p in r.missing_outputs()]


def _row(key: str, result: StageResult | None, seen: dict | None,
         benchmarks: tuple[str, ...] | list[str] = ()) -> run_summary.StageRow:
    status, seconds = (seen["status"], seen["seconds"]) if seen else ("skipped", None)
    outputs = ([result.uri + (f" (v{result.version})" if result.version is not None else "")]
               if result and result.uri else [])
    note = (seen or {}).get("note") or (result.extra.get("note", "") if result and status == "ran" else "")
    # One task evaluates every benchmark, so its failure is recorded for each: the benchmark the error
    # names failed; the others did not finish because of it (not "failed" on an error of their own).
    culprit = note.split(":", 1)[0]
    if status == "failed" and key.startswith("eval-") and culprit in benchmarks and culprit != key[len("eval-"):]:
        status, seconds, note = "skipped", None, f"the eval stage failed on {culprit}"
    return run_summary.StageRow(key, status, seconds, dict(result.metrics) if result else {}, outputs, note)


def _task_of(key: str) -> str:
    """A flow's result key → the recorded stage (an eval suite produces `eval-<benchmark>` keys)."""
    return "eval" if key.startswith("eval-") else key


@task(name="summary", persist_result=False)
def summarize(cfg: Config, results: dict[str, StageResult], recorded: dict[str, dict],
              stages: list[str] | None = None) -> str:
    """The run summary (markdown artifact `run-summary` and `summary.md` in the run folder): every stage,
    ran or cached, its duration, headline metrics, outputs, and the MLflow and Prefect links."""
    flow_run_id = _run_key()
    names = [k for k in list(results) + [s for s in (stages or []) if s not in results] if k != "eval"]
    benchmarks = [k[len("eval-"):] for k in names if k.startswith("eval-")]
    rows = [_row(k, results.get(k), recorded.get(k) or recorded.get(_task_of(k)), benchmarks) for k in names]
    links: dict[str, str] = {}
    tr = pipeline.tracker(cfg, flow_run_id)
    if tr.enabled and tr.parent_run_id:
        exp = tr.client.get_experiment_by_name(tr.experiment)
        ui = os.environ.get("EVR1_MLFLOW_UI_URL") or (tr.uri if str(tr.uri).startswith("http") else None)
        links["MLflow run"] = run_summary.mlflow_run_url(ui, exp.experiment_id, tr.parent_run_id)
    if flow_run_id and (url := _flow_run_url(flow_run_id)):
        links["Prefect flow run"] = url
    markdown = run_summary.render(f"{cfg.run.name}: run summary", rows, links=links)
    run_summary.write(cfg.run_dir(), markdown)
    create_markdown_artifact(key="run-summary", markdown=markdown, description=f"summary of {cfg.run.name}")
    return markdown
