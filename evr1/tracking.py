"""MLflow tracking: one parent run per pipeline run, a nested run per stage, metrics, artifacts, registry.

Kept behind a small class so a stage can run with tracking off (`Tracker.disabled()`) and so the
Prefect tasks never touch MLflow directly.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import mlflow
from mlflow.tracking import MlflowClient


def default_tracking_uri(run_dir: Path) -> str:
    """SQLite under the run folder: the file store is in maintenance mode in MLflow 3.17."""
    run_dir.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{(run_dir / 'mlflow.db').resolve()}"


class Tracker:
    """A handle on one MLflow parent run; `stage()` opens nested runs under it."""

    def __init__(self, uri: str | None, experiment: str, *, artifact_root: Path | None = None, enabled: bool = True):
        self.enabled = enabled
        self.uri = uri
        self.experiment = experiment
        self.parent_run_id: str | None = None
        self._stage_run_id: str | None = None
        if not enabled:
            return
        mlflow.set_tracking_uri(uri)
        client = MlflowClient(uri)
        exp = client.get_experiment_by_name(experiment)
        if exp is None:
            location = artifact_root.resolve().as_uri() if artifact_root else None
            client.create_experiment(experiment, artifact_location=location)
        mlflow.set_experiment(experiment)

    @classmethod
    def disabled(cls) -> "Tracker":
        return cls(None, "", enabled=False)

    @property
    def client(self) -> MlflowClient:
        return MlflowClient(self.uri)

    def start_parent(self, run_name: str, *, params: Mapping[str, Any] = {}, tags: Mapping[str, str] = {},
                     run_id: str | None = None) -> str | None:
        """Open (or reopen, for a resumed flow run) the parent run and log the config as params."""
        if not self.enabled:
            return None
        run = mlflow.start_run(run_id=run_id, run_name=None if run_id else run_name, tags=dict(tags))
        self.parent_run_id = run.info.run_id
        if params and run_id is None:
            _log_params_chunked(params)
        mlflow.end_run()
        return self.parent_run_id

    @contextlib.contextmanager
    def stage(self, name: str, *, params: Mapping[str, Any] = {}) -> Iterator["Tracker"]:
        """A nested run for one stage, closed FAILED if the stage raises."""
        if not self.enabled:
            yield self
            return
        with mlflow.start_run(run_id=self.parent_run_id):
            with mlflow.start_run(run_name=name, nested=True, tags={"evr1.stage": name}) as child:
                self._stage_run_id = child.info.run_id
                if params:
                    _log_params_chunked(params)
                try:
                    yield self
                finally:
                    self._stage_run_id = None

    def log_metrics(self, metrics: Mapping[str, float], step: int | None = None) -> None:
        if self.enabled and metrics:
            mlflow.log_metrics({k: float(v) for k, v in metrics.items()}, step=step)

    def log_params(self, params: Mapping[str, Any]) -> None:
        if self.enabled and params:
            _log_params_chunked(params)

    def log_artifact(self, path: str | Path, artifact_path: str | None = None) -> None:
        if self.enabled:
            mlflow.log_artifact(str(path), artifact_path=artifact_path)

    def log_dict(self, data: Mapping, name: str) -> None:
        if self.enabled:
            mlflow.log_dict(dict(data), name)

    def log_text(self, text: str, name: str) -> None:
        if self.enabled:
            mlflow.log_text(text, name)

    def set_tags(self, tags: Mapping[str, str]) -> None:
        if self.enabled:
            mlflow.set_tags(dict(tags))

    def register_model_dir(self, model_dir: Path, name: str) -> str | None:
        """Log a merged model directory as an artifact of the current run and register it as a new version."""
        if not self.enabled:
            return None
        run = mlflow.active_run()
        mlflow.log_artifacts(str(model_dir), artifact_path="model")
        client = self.client
        try:
            client.get_registered_model(name)
        except mlflow.exceptions.MlflowException:
            client.create_registered_model(name, description="Merged evr1 policies (Hugging Face directories).")
        # A plain directory of files, not an MLflow "logged model" flavour: register its artifact location.
        source = f"{run.info.artifact_uri.rstrip('/')}/model"
        version = client.create_model_version(name, source=source, run_id=run.info.run_id,
                                              tags={"evr1.model_dir": str(model_dir)})
        return str(version.version)


def _log_params_chunked(params: Mapping[str, Any]) -> None:
    # MLflow caps a param value at 6000 characters and a batch at 100 params.
    items = [(k, str(v)[:6000]) for k, v in params.items()]
    for i in range(0, len(items), 100):
        mlflow.log_params(dict(items[i : i + 100]))


def latest_model_version(uri: str, name: str) -> tuple[str, Path] | None:
    """The newest registered version of `name` and the model directory it was merged into."""
    client = MlflowClient(uri)
    try:
        versions = client.search_model_versions(f"name = '{name}'")
    except mlflow.exceptions.MlflowException:
        return None
    if not versions:
        return None
    newest = max(versions, key=lambda v: int(v.version))
    model_dir = (newest.tags or {}).get("evr1.model_dir")
    if model_dir and Path(model_dir).exists():
        return newest.version, Path(model_dir)
    local = mlflow.artifacts.download_artifacts(artifact_uri=newest.source, tracking_uri=uri)
    return newest.version, Path(local)


os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
