"""Nightly evaluation: the newest registered model on a benchmark suite from `conf/`.

Deployed with a cron schedule by prefect.yaml (`nightly-eval/nightly-tiny`, `nightly-eval/nightly`);
run once by hand with `prefect deployment run 'nightly-eval/nightly'` or
`python -m flows.nightly_eval conf/nightly_tiny.yaml`. The suite is one cached task keyed by the
model version's content, the eval settings and the benchmarks, so a night without a new model re-uses
last night's results; it runs every benchmark through one engine (one model load, one queue), and a
rerun evaluates only the items that have no result yet or failed.
"""

from __future__ import annotations

import sys

from prefect import flow, get_run_logger

from evr1.config import load_config
from evr1.pipeline.results import StageResult
from tasks import stages


@flow(name="nightly-eval", persist_result=True, log_prints=True)
def nightly_eval(config: str = "conf/nightly_tiny.yaml", overrides: list[str] | None = None,
                 model_name: str | None = None) -> dict[str, StageResult]:
    """Evaluate the latest version of `model_name` (default `tracking.register_model`) on `eval.benchmarks`."""
    cfg = load_config(config, overrides or [])
    log = get_run_logger()
    model = stages.registered_model(cfg, model_name)
    log.info(f"evaluating {model.extra.get('name')} version {model.version}: {model.uri}")
    from evr1.eval.heldout import uses_run_samples

    needs_data = uses_run_samples(cfg.eval.benchmarks)  # the run's held-out or test split
    samples = stages.ingest(cfg) if needs_data else StageResult(stage="ingest", uri="")
    frames = StageResult(stage="cache", uri="")
    results = {"model": model}
    evals = stages.evaluate_suite(cfg, model, samples, frames, list(cfg.eval.benchmarks))
    results.update({f"eval-{name}": r for name, r in zip(cfg.eval.benchmarks, evals)})
    print(stages.report(cfg, model, evals))
    return results


if __name__ == "__main__":
    nightly_eval(sys.argv[1] if len(sys.argv) > 1 else "conf/nightly_tiny.yaml", sys.argv[2:])
