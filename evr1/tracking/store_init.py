"""A new run's SQLite MLflow store, created ahead of the flow in a process of its own.

Creating an MLflow SQLite store runs every Alembic migration, one committed transaction each: 3-5 s
on an idle laptop, over 10 s on a loaded one, mostly waiting on the disk. Left to the first stage,
that time is spent between `ingest` starting and its first row. `evr1 run` starts this module as a
process before the flow's own process imports Prefect and starts its API server, so the two overlap.

A process, not a thread of the flow's process: a thread importing MLflow while the main thread
imports Prefect (both pull in SQLAlchemy) was seen to hand one of them a partly initialised module.

Both sides take the same file lock (`.<store>.lock` beside it, `fcntl.flock`) around creating or
first opening the store, so whichever comes first creates it and the other waits for it to finish,
then finds the tables there. The lock goes with the process: a killed creator never leaves it held.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

__all__ = ["default_tracking_uri", "lock_path", "sqlite_path", "store_lock", "start_store_init"]


def default_tracking_uri(run_dir: Path) -> str:
    """SQLite under the run folder: the file store is in maintenance mode in MLflow 3.17. (Here, not
    in tracker.py, so `evr1 run`'s first process can name the store without importing MLflow.)"""
    run_dir.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{(run_dir / 'mlflow.db').resolve()}"


def sqlite_path(uri: str | None) -> Path | None:
    """The database file of a `sqlite:///…` tracking URI (None for any other store)."""
    if not uri or not uri.startswith("sqlite:///"):
        return None
    return Path(uri[len("sqlite:///"):])


def lock_path(db: Path) -> Path:
    """The lock file beside a SQLite store, hidden: `.mlflow.db.lock`."""
    return db.with_name(f".{db.name}.lock")


@contextlib.contextmanager
def store_lock(uri: str | None) -> Iterator[None]:
    """Held while a SQLite store is created or first opened (no-op for other stores)."""
    path = sqlite_path(uri)
    if path is None:
        yield
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(lock_path(path), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def start_store_init(uri: str | None, log: Path | None = None) -> subprocess.Popen | None:
    """Create the store at `uri` in a background process when it is a SQLite file that does not exist
    yet; None when there is nothing to create. The caller does not wait: users of the store take
    `store_lock` first."""
    path = sqlite_path(uri)
    if path is None or path.exists():
        return None
    path.parent.mkdir(parents=True, exist_ok=True)
    if log is not None:
        log.parent.mkdir(parents=True, exist_ok=True)
    out = open(log, "ab") if log is not None else subprocess.DEVNULL  # noqa: SIM115 - handed to the child
    try:
        return subprocess.Popen([sys.executable, "-m", "evr1.tracking.store_init", uri],
                                stdin=subprocess.DEVNULL, stdout=out, stderr=out)
    finally:
        if log is not None:
            out.close()


def _create(uri: str) -> None:
    with store_lock(uri):  # taken before MLflow is imported: this process is then first, as a rule
        from mlflow.tracking import MlflowClient

        MlflowClient(uri).search_experiments(max_results=1)  # runs the migrations


if __name__ == "__main__":
    _create(sys.argv[1])
