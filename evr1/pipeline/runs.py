"""A pipeline run's folder and its MLflow parent run: where every stage writes, and which run it logs to."""

from __future__ import annotations

import json
import os
import time
import uuid
from pathlib import Path

from evr1.config import Config, flat_params
from evr1.pipeline import lineage
from evr1.pipeline.lineage import STAGE_SECTIONS
from evr1.tracking import Tracker, default_tracking_uri


PARENT_RUN_FILE = "mlflow_parent_runs.json"


def run_paths(cfg: Config) -> dict[str, Path]:
    root = cfg.run_dir()
    return {"root": root, "data": root / "data", "lance": root / "lance", "models": root / "models",
            "checkpoints": root / "checkpoints", "merged": root / "merged", "eval": root / "eval"}


def run_token(cfg: Config) -> str:
    """A random id written once into the run folder: it changes when the folder is deleted and rebuilt.

    Part of every stage's Prefect cache key, so a cached result can never point at a run folder
    that no longer holds what the stage wrote.
    """
    root = run_paths(cfg)["root"]
    marker = root / ".evr1-run-token"
    if not marker.exists():
        root.mkdir(parents=True, exist_ok=True)
        tmp = root / f".evr1-run-token.{uuid.uuid4().hex}"
        tmp.write_text(uuid.uuid4().hex)
        try:
            os.link(tmp, marker)  # atomic create-if-absent: concurrent first calls agree on one token
        except FileExistsError:
            pass
        finally:
            tmp.unlink()
    return marker.read_text().strip()


_PROCESS_RUN_KEY = uuid.uuid4().hex


_SWEPT: set[str] = set()


TRAIN_RUN_FILE = "mlflow_train_run.json"


def tracker(cfg: Config, run_key: str | None = None) -> Tracker:
    """The tracker attached to this pipeline run's parent MLflow run.

    One parent run per pipeline run: `run_key` is the Prefect flow-run id (a retry of the same
    flow run keeps it, so its stages land under the same parent) or, outside Prefect, one key per
    process. The run folder remembers key → parent run id.
    """
    t = cfg.tracking
    if not t.enabled:
        return Tracker.disabled()
    root = run_paths(cfg)["root"]
    uri = t.uri or default_tracking_uri(root)
    tr = Tracker(uri, t.experiment, artifact_root=root / "mlartifacts")
    if uri not in _SWEPT:  # runs a killed command left RUNNING are closed KILLED, once per process
        _SWEPT.add(uri)
        tr.close_dead_runs(root)
    marker = root / PARENT_RUN_FILE
    parents = json.loads(marker.read_text()) if marker.exists() else {}
    key = f"{uri}|{run_key or _PROCESS_RUN_KEY}"
    if key in parents:
        tr.parent_run_id = parents[key]
    else:
        tr.start_parent(parent_run_name(cfg), params=flat_params(cfg),
                        tags={"evr1.run_dir": str(root), "evr1.config_fingerprint": cfg.fingerprint(),
                              "evr1.git_commit": lineage.git_commit(), **lineage.context()})
        _type_experiment(tr)
        parents[key] = tr.parent_run_id
        tmp = marker.with_suffix(f".{uuid.uuid4().hex}.tmp")
        tmp.write_text(json.dumps(parents, indent=1))
        os.replace(tmp, marker)
    return tr


def parent_run_name(cfg: Config) -> str:
    """`<run.name> · <flow run>` (Prefect's flow-run name when a flow runs the stages, else the start
    time): several flow runs of one config stay apart in MLflow's run list."""
    context = lineage.context()
    when = context.get("prefect.flow_run_name") or time.strftime("%Y-%m-%d %H:%M:%S")
    return f"{cfg.run.name} · {when}"


def _type_experiment(tr: Tracker) -> None:
    """Open the experiment as model training in the MLflow 3 UI (not the GenAI evaluations view)."""
    exp = tr.client.get_experiment_by_name(tr.experiment)
    if exp is not None and exp.tags.get("mlflow.experimentKind") != "custom_model_development":
        tr.client.set_experiment_tag(exp.experiment_id, "mlflow.experimentKind", "custom_model_development")


def tag_stage(tr: Tracker, cfg: Config, stage: str, **io: object) -> None:
    """Tag the open stage run with what it read and wrote (see `evr1.pipeline.lineage.stage_tags`)."""
    tr.set_tags(lineage.stage_tags(stage, cfg.fingerprint(*STAGE_SECTIONS[stage]), **io))


def log_table_input(tr: Tracker, uri: str, version: int | None, name: str, context: str) -> None:
    """Log a Lance table as an `mlflow.data` input of the open stage run (only when tracking is on:
    MLflow's fluent API would otherwise open a run of its own)."""
    if tr.enabled and tr.stage_run_id is not None and uri and version is not None:
        lineage.log_lance_input(uri, version, name, context)


def previous_train_run(out_dir: Path, tr: Tracker) -> str | None:
    """The MLflow run an earlier (killed, or shorter) training of this checkpoint folder logged to:
    continuing it keeps one training one curve. None when there is none."""
    marker = out_dir / TRAIN_RUN_FILE
    if not tr.enabled or not marker.exists():
        return None
    return json.loads(marker.read_text()).get(tr.uri)


def remember_train_run(out_dir: Path, tr: Tracker) -> None:
    if not tr.enabled or tr.stage_run_id is None:
        return
    marker = out_dir / TRAIN_RUN_FILE
    known = json.loads(marker.read_text()) if marker.exists() else {}
    if known.get(tr.uri) != tr.stage_run_id:
        out_dir.mkdir(parents=True, exist_ok=True)
        tmp = marker.with_suffix(f".{uuid.uuid4().hex}.tmp")
        tmp.write_text(json.dumps({**known, tr.uri: tr.stage_run_id}))
        os.replace(tmp, marker)
