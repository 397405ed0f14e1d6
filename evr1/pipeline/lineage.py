"""What each stage read and wrote, and with which code: stage-key code versions and MLflow lineage.

- `code_version(stage)`: a hash of the source files the stage runs (the import closure of its stage
  function), part of the stage's cache key, so editing the trainer re-runs training (and what follows)
  but not ingest.
- `set_context(tags)`: tags an orchestrator adds to every stage run of this process (the Prefect
  tasks set the flow-run id and URL); `evr1` itself never imports the orchestrator.
- `stage_tags(...)` and `log_lance_input(...)`: the lineage tags and `mlflow.data` datasets.
"""

from __future__ import annotations

import functools
import hashlib
import subprocess
import warnings
from collections.abc import Mapping
from pathlib import Path

import evr1

PACKAGE = Path(evr1.__file__).resolve().parent

# The function that runs each stage: the code part of its cache key is the import closure of that
# function's body (`evr1.pipeline.code`), so it follows the code instead of a hand-kept list.
STAGE_FUNCTIONS: dict[str, str] = {
    "ingest": "stage_ingest",
    "model": "stage_model",
    "cache": "stage_cache",
    "train": "stage_train",
    "merge": "stage_merge",
    "eval": "stage_eval_suite",
}
STAGES_MODULE = "evr1.pipeline.stages"

# What each stage's result depends on, besides its upstream results: config sections and input files.
STAGE_SECTIONS: dict[str, tuple[str, ...]] = {
    "ingest": ("data", "reward"),
    "model": ("model",),
    "cache": ("cache",),
    "train": ("run", "algorithm", "rollout", "reward", "trainer", "model", "cache"),
    "merge": ("model", "tracking"),
    "eval": ("eval", "rollout", "cache", "reward"),
}

_CONTEXT: dict[str, str] = {}


def stage_files(stage: str) -> list[Path]:
    """The source files stage `stage` runs: the import closure of its stage function."""
    from evr1.pipeline.code import stage_files as closure_files

    return closure_files(STAGES_MODULE, STAGE_FUNCTIONS[stage])


@functools.lru_cache(maxsize=None)
def code_version(stage: str | None = None) -> str:
    """A 16-hex hash of the `.py` files the stage runs (the whole package when `stage` is None)."""
    files = stage_files(stage) if stage in STAGE_FUNCTIONS else sorted(PACKAGE.rglob("*.py"))
    h = hashlib.sha256()
    for f in files:
        h.update(str(f.relative_to(PACKAGE)).encode())
        h.update(f.read_bytes())
    return h.hexdigest()[:16]


@functools.lru_cache(maxsize=1)
def git_commit() -> str:
    """The repository commit the package runs from ('' outside a git checkout), '+dirty' if edited."""
    try:
        sha = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=PACKAGE, capture_output=True,
                             text=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "."], cwd=PACKAGE, capture_output=True,
                               text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""
    return f"{sha}+dirty" if sha and dirty else sha


def set_context(tags: Mapping[str, str]) -> None:
    """Tags for every stage run from now on in this process (e.g. `prefect.flow_run_id`)."""
    _CONTEXT.update({k: str(v) for k, v in tags.items() if v is not None})


def context() -> dict[str, str]:
    return dict(_CONTEXT)


def stage_tags(stage: str, config_fingerprint: str, **io: object) -> dict[str, str]:
    """Lineage tags for a stage run: `evr1.in.*`/`evr1.out.*` for what it read and wrote (`io` keys
    like `in_samples_uri` become `evr1.in.samples_uri`), the config fingerprint, the code version and
    the orchestrator's context."""
    tags = {"evr1.config_fingerprint": config_fingerprint, "evr1.code_version": code_version(stage),
            "evr1.package_version": evr1.__version__, "evr1.git_commit": git_commit(), **context()}
    for key, value in io.items():
        if value is None or value == "":
            continue
        side, _, name = key.partition("_")
        tags[f"evr1.{side}.{name}"] = str(value)
    return tags


def log_lance_input(uri: str, version: int | None, name: str, context: str) -> None:
    """Log a Lance table (at `version`) as an `mlflow.data` input of the active run: the run page lists
    it under Datasets with its source URI and a digest that changes with the version."""
    import mlflow
    from mlflow.data.dataset_source_registry import resolve_dataset_source
    from mlflow.data.meta_dataset import MetaDataset

    try:
        with warnings.catch_warnings():
            # A local Lance folder matches MLflow's local-artifact source twice (a plain path and a file
            # URI) and it warns that it picked one, at every stage: the pick is the right one.
            warnings.filterwarnings("ignore", message="The specified dataset source can be interpreted")
            source = resolve_dataset_source(uri)
    except Exception:  # a URI scheme MLflow has no source for (e.g. lance+s3): keep it as a plain path
        from mlflow.data.http_dataset_source import HTTPDatasetSource
        source = HTTPDatasetSource(uri)
    digest = hashlib.sha256(f"{uri}@{version}".encode()).hexdigest()[:8]
    dataset = MetaDataset(source=source, name=f"{name}@v{version}" if version is not None else name, digest=digest)
    mlflow.log_input(dataset, context=context, tags={"lance.uri": uri, "lance.version": str(version)})
