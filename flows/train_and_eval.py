"""The whole DAG: ingest → cache → train → merge → eval, one MLflow parent run per flow run.

Run it with `evr1 run conf/tiny.yaml`, or deploy it (`prefect deploy --all`, see prefect.yaml) and
start it with `prefect deployment run 'train-and-eval/tiny'`. Every flow run ends with a run summary
(artifact `run-summary`, and `summary.md` in the run folder), also when a stage failed. `force`
re-runs all stages (True) or the named ones (e.g. `["train"]`) instead of serving them from the cache.
"""

from __future__ import annotations

from datetime import datetime, timezone

from prefect import flow, get_run_logger

from evr1.config import ConfigError, load_config, preflight
from evr1.eval.evaluate import suite_problems
from evr1.pipeline.results import StageResult
from tasks import stages

STAGES = ["ingest", "model", "cache", "train", "merge"]


@flow(name="train-and-eval", persist_result=True, log_prints=True)
def train_and_eval(config: str = "conf/tiny.yaml", overrides: list[str] | None = None,
                   force: bool | list[str] = False) -> dict[str, StageResult]:
    """Train a model with GRPO on the configured data and evaluate the merged result."""
    rec = stages.Recorder(datetime.now(timezone.utc))
    cfg = load_config(config, overrides or [])
    log = get_run_logger()
    # before any stage: a missing file or an unreachable service, named at once
    problems = preflight(cfg) + suite_problems(cfg)
    if problems:
        raise ConfigError("\n".join(f"{config}: {p}" for p in problems))
    run = {name: stages.forced(getattr(stages, name), force) for name in STAGES}
    expected = STAGES + ([f"eval-{name}" for name in cfg.eval.benchmarks] if cfg.eval.enabled else [])
    results: dict[str, StageResult] = {}
    try:
        results["ingest"] = samples = rec("ingest", run["ingest"], cfg)
        results["model"] = base = rec("model", run["model"], cfg)
        results["cache"] = frames = rec("cache", run["cache"], cfg, samples, base)
        results["train"] = ckpt = rec("train", run["train"], cfg, samples, frames, base)
        results["merge"] = merged = rec("merge", run["merge"], cfg, ckpt, base)
        if cfg.eval.enabled:
            evals = rec("eval", stages.forced(stages.evaluate_suite, force), cfg, merged, samples, frames,
                        list(cfg.eval.benchmarks))
            results["eval"] = evals[0]
            results.update({f"eval-{name}": r for name, r in zip(cfg.eval.benchmarks, evals)})
            stages.report(cfg, merged, evals)
    finally:  # also after a failed stage; its own failure never hides the stage's error
        stages.summarize(cfg, results, rec.rows, expected, return_state=True)
    for key, r in results.items():
        if key != "eval":  # the first benchmark's result again (eval-<name> follows)
            log.info(r.summary())
    return results
