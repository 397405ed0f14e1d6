"""MLflow tracking: one parent run per pipeline run, a nested run per stage, metrics, artifacts, registry.

Kept behind a small class so a stage can run with tracking off (`Tracker.disabled()`) and so the
Prefect tasks never touch MLflow directly.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import signal
import socket
import threading
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import mlflow
from mlflow.tracking import MlflowClient

from evr1.cluster.processes import same_process, started
from evr1.tracking.store_init import default_tracking_uri, store_lock  # noqa: F401 (re-exported: evr1.tracking)


_HELD = (signal.SIGINT, signal.SIGTERM)


@contextlib.contextmanager
def signals_held() -> Iterator[None]:
    """Hold Ctrl-C and SIGTERM until an MLflow write is done, then act on them. Raised inside one, the
    KeyboardInterrupt or SystemExit leaves its SQLite transaction open (MLflow rolls back on Exception
    only), the database stays locked, and closing the runs KILLED fails: the command exits 1 with
    "database is locked" instead of 130 or 143 (tests/e2e/test_kill.py's rare failure)."""
    previous = {s: signal.getsignal(s) for s in _HELD}
    if threading.current_thread() is not threading.main_thread() or None in previous.values():
        yield  # signal handlers belong to the main thread; None: a handler not installed from Python
        return
    pending: list[int] = []
    for s in _HELD:
        signal.signal(s, lambda signum, frame: pending.append(signum))
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        if pending:
            signal.raise_signal(pending[0])


def _held(method: Callable) -> Callable:
    @functools.wraps(method)
    def wrapper(*args, **kwargs):
        with signals_held():
            return method(*args, **kwargs)
    return wrapper


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
        with store_lock(uri):  # a new store may be being created by `evr1 run`'s store_init process
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

    @_held
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
    def stage(self, name: str, *, params: Mapping[str, Any] = {}, run_id: str | None = None
              ) -> Iterator["Tracker"]:
        """A nested run for one stage, or the stage run `run_id` reopened (a killed training continues
        its curve); closed FINISHED, FAILED if the stage raises, KILLED if it is interrupted (Ctrl-C,
        SIGTERM). Both runs carry this process's id, so a later command can close them after a kill -9."""
        if not self.enabled:
            yield self
            return
        owner = owner_tags()
        if run_id is not None and not self._exists(run_id):
            run_id = None
        with signals_held():
            mlflow.start_run(run_id=self.parent_run_id, tags=owner)
        status, opened = "FAILED", 1
        try:
            with signals_held():
                if run_id is None:
                    child = mlflow.start_run(run_name=name, nested=True, tags={"evr1.stage": name, **owner})
                else:
                    child = mlflow.start_run(run_id=run_id, nested=True, tags=owner)
                    known = child.data.params
                    params = {k: v for k, v in params.items() if k not in known}
                opened = 2
                self._stage_run_id = child.info.run_id
                if params:
                    _log_params_chunked(params)
            yield self
            status = "FINISHED"
        except (KeyboardInterrupt, SystemExit):
            status = "KILLED"
            raise
        finally:
            self._stage_run_id = None
            with signals_held():
                for _ in range(opened):  # the stage run, then the parent
                    mlflow.end_run(status)

    def _exists(self, run_id: str) -> bool:
        try:
            return self.client.get_run(run_id).info.lifecycle_stage == "active"
        except mlflow.exceptions.MlflowException:
            return False

    @property
    def stage_run_id(self) -> str | None:
        """The stage run open now (inside `stage`), else None."""
        return self._stage_run_id

    def logged_steps(self) -> dict[str, int]:
        """metric → the last step the open stage run holds for it (empty for a new run): a resumed
        training skips what its killed predecessor already logged, so each step is logged once."""
        if not self.enabled or self._stage_run_id is None:
            return {}
        client = self.client
        keys = client.get_run(self._stage_run_id).data.metrics
        return {k: max((m.step for m in client.get_metric_history(self._stage_run_id, k)), default=0) for k in keys}

    def logged_at_step(self, step: int, prefix: str = "") -> dict[str, float]:
        """The open stage run's metrics (those starting with `prefix`) logged at `step`: e.g. the
        validation before RL (step 0) of a training that this command continues."""
        if not self.enabled or self._stage_run_id is None:
            return {}
        client = self.client
        keys = [k for k in client.get_run(self._stage_run_id).data.metrics if k.startswith(prefix)]
        out = {}
        for key in keys:
            at = [m.value for m in client.get_metric_history(self._stage_run_id, key) if m.step == step]
            if at:
                out[key] = at[-1]
        return out

    @_held
    def close_dead_runs(self, run_dir: str | Path) -> list[str]:
        """Mark KILLED the RUNNING runs of `run_dir` (parent and stage runs) whose owning process on this
        host is gone: a command killed with -9 cannot close its own runs. Returns their ids."""
        if not self.enabled:
            return []
        client = self.client
        exp = client.get_experiment_by_name(self.experiment)
        if exp is None:
            return []
        closed = []
        for run in client.search_runs([exp.experiment_id], "attributes.status = 'RUNNING'", max_results=5000):
            tags = run.data.tags
            if tags.get("evr1.run_dir") not in (None, str(run_dir)) or "evr1.pid" not in tags:
                continue
            if tags.get("evr1.host") == socket.gethostname() and not same_process(tags["evr1.pid"],
                                                                                 tags.get("evr1.pid_started")):
                client.set_terminated(run.info.run_id, "KILLED")
                closed.append(run.info.run_id)
        return closed

    @_held
    def log_metrics(self, metrics: Mapping[str, float], step: int | None = None) -> None:
        if self.enabled and metrics:
            mlflow.log_metrics({k: float(v) for k, v in metrics.items()}, step=step)

    @_held
    def log_params(self, params: Mapping[str, Any]) -> None:
        if self.enabled and params:
            _log_params_chunked(params)

    @_held
    def log_artifact(self, path: str | Path, artifact_path: str | None = None) -> None:
        if self.enabled:
            mlflow.log_artifact(str(path), artifact_path=artifact_path)

    @_held
    def log_dict(self, data: Mapping, name: str) -> None:
        if self.enabled:
            mlflow.log_dict(dict(data), name)

    @_held
    def log_table(self, rows: list[Mapping[str, Any]], artifact_file: str) -> None:
        """Rows of one table (same keys) as a JSON artifact in MLflow's table layout ({"columns", "data"}).

        Not `mlflow.log_table`: it lists every table it logs in one run tag, which MLflow cuts at 8,000
        characters on a SQL store, after which every later call fails to parse it. A 600-step run lost
        its rollout tables from step 139 on that way. Logging each file once overwrites nothing."""
        if self.enabled and rows:
            columns = list(rows[0])
            mlflow.log_dict({"columns": columns, "data": [[r.get(k) for k in columns] for r in rows]}, artifact_file)

    @_held
    def log_text(self, text: str, name: str) -> None:
        if self.enabled:
            mlflow.log_text(text, name)

    @_held
    def set_tags(self, tags: Mapping[str, str]) -> None:
        if self.enabled:
            mlflow.set_tags(dict(tags))

    @_held
    def register_model_dir(self, model_dir: Path, name: str, *, weights_sha256: str | None = None,
                           description: str | None = None) -> str | None:
        """Log a merged model directory as an artifact of the current run and register it as a new version.

        Weights already registered under `name` (same `weights_sha256`) reuse that version instead of
        adding a duplicate; `description` says how the version was trained."""
        if not self.enabled:
            return None
        client = self.client
        try:
            client.get_registered_model(name)
        except mlflow.exceptions.MlflowException:
            client.create_registered_model(name, description="Merged evr1 policies (Hugging Face directories).")
        if weights_sha256:
            same = client.search_model_versions(f"name = '{name}' and tag.`evr1.weights_sha256` = '{weights_sha256}'")
            if same:
                return str(min(int(v.version) for v in same))
        run = mlflow.active_run()
        mlflow.log_artifacts(str(model_dir), artifact_path="model")
        # A plain directory of files, not an MLflow "logged model" flavour: register its artifact location.
        source = f"{run.info.artifact_uri.rstrip('/')}/model"
        tags = {"evr1.model_dir": str(model_dir), **({"evr1.weights_sha256": weights_sha256} if weights_sha256 else {})}
        version = client.create_model_version(name, source=source, run_id=run.info.run_id, tags=tags,
                                              description=description)
        client.set_registered_model_alias(name, CANDIDATE_ALIAS, version.version)
        return str(version.version)

    def score_model_version(self, name: str, version: str | int, scores: Mapping[str, float]) -> None:
        """Tag a registered version with its evaluation scores (`eval.<benchmark>` = score), so the
        registry lists each version beside what it scored."""
        if not self.enabled:
            return
        for benchmark, value in scores.items():
            self.client.set_model_version_tag(name, str(version), f"eval.{benchmark}", f"{value:.4f}")

    def log_parent_metrics(self, metrics: Mapping[str, float]) -> None:
        """Headline figures on the parent run, where a person comparing runs looks first."""
        if self.enabled and self.parent_run_id and metrics:
            client = self.client
            for key, value in metrics.items():
                client.log_metric(self.parent_run_id, key, float(value))


def owner_tags() -> dict[str, str]:
    """Tags naming the process that has a run open: host, pid and the pid's start time."""
    return {"evr1.host": socket.gethostname(), "evr1.pid": str(os.getpid()), "evr1.pid_started": started(os.getpid())}


def _log_params_chunked(params: Mapping[str, Any]) -> None:
    # MLflow caps a param value at 6000 characters and a batch at 100 params.
    items = [(k, str(v)[:6000]) for k, v in params.items()]
    for i in range(0, len(items), 100):
        mlflow.log_params(dict(items[i : i + 100]))


# The alias every newly registered version takes: what a nightly evaluation follows (`models:/name@candidate`).
CANDIDATE_ALIAS = "candidate"


def latest_model_version(uri: str, name: str) -> tuple[str, Path] | None:
    """The version of `name` the `candidate` alias names (the newest registered one when no version
    carries it) and the model directory it was merged into."""
    client = MlflowClient(uri)
    try:
        versions = client.search_model_versions(f"name = '{name}'")
    except mlflow.exceptions.MlflowException:
        return None
    if not versions:
        return None
    try:
        newest = client.get_model_version_by_alias(name, CANDIDATE_ALIAS)
    except mlflow.exceptions.MlflowException:
        newest = max(versions, key=lambda v: int(v.version))
    return newest.version, _model_dir(newest, uri)


def _model_dir(version, uri: str) -> Path:
    """Where a registered version's files are: the merged folder it was registered from when this
    machine has it, else its artifacts downloaded."""
    model_dir = (version.tags or {}).get("evr1.model_dir")
    if model_dir and Path(model_dir).exists():
        return Path(model_dir)
    return Path(mlflow.artifacts.download_artifacts(artifact_uri=version.source, tracking_uri=uri))


MODEL_URI_PREFIX = "models:/"


def resolve_model_uri(uri: str, model_uri: str) -> tuple[str, str, Path, str | None]:
    """`models:/<name>@<alias>`, `models:/<name>/<version>` or `models:/<name>` (its `candidate`, else
    its newest version) in the registry at tracking `uri` → (name, version, model directory, weights
    sha256 when registered with one). A name, version or alias the registry lacks is a LookupError
    saying what it has."""
    rest = model_uri[len(MODEL_URI_PREFIX):].strip("/")
    name, alias, number = rest, None, None
    if "@" in rest:
        name, alias = rest.split("@", 1)
    elif "/" in rest:
        name, number = rest.rsplit("/", 1)
    if not name:
        raise ValueError(f"{model_uri}: expected models:/<name>@<alias>, models:/<name>/<version> or models:/<name>")
    client = MlflowClient(uri)
    try:
        versions = client.search_model_versions(f"name = '{name}'")
    except mlflow.exceptions.MlflowException:
        versions = []
    if not versions:
        names = sorted(m.name for m in client.search_registered_models())
        raise LookupError(f"{model_uri}: no registered model {name!r} in {uri} (registered: "
                          f"{', '.join(names) or 'none; `evr1 run` registers its merged model'})")
    if alias is not None:
        try:
            version = client.get_model_version_by_alias(name, alias)
        except mlflow.exceptions.MlflowException:
            aliases = sorted(client.get_registered_model(name).aliases or {})
            raise LookupError(f"{model_uri}: model {name!r} has no alias {alias!r} (aliases: "
                              f"{', '.join(aliases) or 'none'})") from None
    elif number is not None:
        version = next((v for v in versions if str(v.version) == number), None)
        if version is None:
            raise LookupError(f"{model_uri}: model {name!r} has no version {number} (versions: "
                              f"{', '.join(sorted((str(v.version) for v in versions), key=int))})")
    else:
        found = latest_model_version(uri, name)
        assert found is not None
        return name, str(found[0]), found[1], _version_tag(client, name, found[0])
    return name, str(version.version), _model_dir(version, uri), (version.tags or {}).get("evr1.weights_sha256")


def _version_tag(client: MlflowClient, name: str, version: str) -> str | None:
    return (client.get_model_version(name, str(version)).tags or {}).get("evr1.weights_sha256")


os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
# "Creating initial MLflow database tables…" at INFO on every new run folder: nothing a user acts on.
logging.getLogger("mlflow.store.db.utils").setLevel(logging.WARNING)
