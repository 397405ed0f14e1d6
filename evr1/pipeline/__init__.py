"""The DAG's stages as plain functions (`stages`), the run folder and its MLflow parent run (`runs`),
what a cached stage result is keyed by (`keys`), which code and inputs each stage used (`lineage`),
the reference stages hand each other (`results.StageResult`) and the flow run's table (`summary`).

`tasks/` and `flows/` wrap these in Prefect; `evr1 ingest|cache|train|merge|eval` call them directly.
"""

from evr1.pipeline.keys import eval_dir, stage_key, training_fingerprint
from evr1.pipeline.results import StageResult
from evr1.pipeline.runs import run_paths, run_token, tracker
from evr1.pipeline.stages import (eval_frames_uri, run_frames_uri, stage_cache, stage_cache_benchmarks, stage_eval,
                                  stage_eval_suite, stage_ingest, stage_merge, stage_model, stage_registered_model,
                                  stage_train)
from evr1.tracking import default_tracking_uri

__all__ = [
    "StageResult", "default_tracking_uri", "eval_dir", "eval_frames_uri", "run_frames_uri", "run_paths", "run_token",
    "stage_cache", "stage_cache_benchmarks", "stage_eval", "stage_eval_suite", "stage_ingest", "stage_key",
    "stage_merge", "stage_model", "stage_registered_model", "stage_train", "tracker", "training_fingerprint",
]
