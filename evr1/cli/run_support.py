"""What `evr1 run` needs around the flow: its start-up spans for `--timings`, Prefect's log records
kept off the terminal (in the run's log file), the tools' paths in the printed hints, and the MLflow
runs an interrupted run leaves to close."""

from __future__ import annotations

import logging
import os
import shutil
import sys
import time
from pathlib import Path

from evr1.cli.app import _DEBUG, _IMPORTED_AT

STARTED_ENV, SPAWNED_ENV = "EVR1_STARTED_AT", "EVR1_SPAWNED_AT"  # when `evr1 run` started, when its child did


def _process_started() -> float:
    """When this process started (epoch seconds): the time a user pressed Enter, near enough."""
    try:
        import psutil

        return psutil.Process().create_time()
    except Exception:  # noqa: BLE001 - a missing psutil only makes the first span shorter
        return _IMPORTED_AT


def _startup_spans(progress) -> None:
    """In `evr1 run`'s child: the parent's start-up and this process's, as the timeline's first spans."""
    started, spawned = (float(os.environ.get(k, 0) or 0) for k in (STARTED_ENV, SPAWNED_ENV))
    if started and spawned:
        progress.add_span("evr1 start-up (imports, config and preflight checks)", started, spawned)
    if spawned:
        progress.add_span("flow process start-up (imports, config)", spawned, time.time())


def _no_stage_failure(record: logging.LogRecord) -> bool:
    """Off the terminal (not the log file, not the Prefect UI): a failed stage's and flow's error
    records with their tracebacks, which `evr1` says in one line at the end (`--debug`: all of it)."""
    failed_run = record.levelno >= logging.ERROR and record.name in ("prefect.task_runs", "prefect.flow_runs")
    return not failed_run


def quiet_prefect(log: Path) -> logging.Handler:
    """Prefect's INFO lines (temporary server, task and flow states) off the terminal and into `log`:
    its console handlers keep warnings and errors only (the level PREFECT_LOGGING_HANDLERS_CONSOLE_LEVEL
    names, WARNING unless a user set it), the file gets everything from INFO up, the Prefect UI still
    gets them all (its API handler is left alone). Called once Prefect is imported (its logging set up)."""
    from prefect.logging.handlers import PrefectConsoleHandler

    level = logging.getLevelName(os.environ.get("PREFECT_LOGGING_HANDLERS_CONSOLE_LEVEL", "WARNING").upper())
    for name in (None, "prefect", "uvicorn", "prefect.server"):
        for h in logging.getLogger(name).handlers:
            if isinstance(h, PrefectConsoleHandler):
                if isinstance(level, int):
                    h.setLevel(max(h.level, level))
                if not _DEBUG["on"]:
                    h.addFilter(_no_stage_failure)
    log.parent.mkdir(parents=True, exist_ok=True)
    handler = logging.FileHandler(log, encoding="utf-8")
    handler.setLevel(logging.INFO)
    handler.setFormatter(logging.Formatter("%(asctime)s | %(levelname)-7s | %(name)s - %(message)s"))
    for name in ("prefect", "uvicorn"):  # uvicorn: the temporary server's own lines (propagate: false)
        logging.getLogger(name).addHandler(handler)
    return handler


def _tool(name: str) -> str:
    """How to call `name` from here: bare when the PATH finds this interpreter's copy, else its path."""
    mine = Path(sys.executable).parent / name
    found = shutil.which(name)
    if mine.exists() and (found is None or Path(found).resolve() != mine.resolve()):
        return str(mine)
    return name


def _close_killed_runs(cfg) -> None:
    """MLflow runs an interrupted child could not close (it was killed) are closed KILLED now."""
    from evr1.tracking import Tracker, default_tracking_uri

    root = cfg.run_dir()
    Tracker(cfg.tracking.uri or default_tracking_uri(root), cfg.tracking.experiment,
            artifact_root=root / "mlartifacts").close_dead_runs(root)
