"""The MLflow store created ahead of the flow (evr1/tracking/store_init.py): a real SQLite store made
by the background process, and a Tracker that waits on the lock instead of creating tables beside it."""

from __future__ import annotations

import fcntl
import os
import threading
import time

from mlflow.tracking import MlflowClient

from evr1.tracking import Tracker
from evr1.tracking.store_init import default_tracking_uri, lock_path, sqlite_path, start_store_init, store_lock


def test_the_background_process_creates_a_store_mlflow_opens(tmp_path):
    uri = default_tracking_uri(tmp_path / "run")
    proc = start_store_init(uri, log=tmp_path / "run" / "logs" / "init.log")
    assert proc is not None
    assert proc.wait(timeout=300) == 0, (tmp_path / "run" / "logs" / "init.log").read_text()
    assert sqlite_path(uri).stat().st_size > 0
    assert [e.name for e in MlflowClient(uri).search_experiments()] == ["Default"]  # tables at the head revision
    assert start_store_init(uri) is None  # it exists: nothing to do


def test_nothing_starts_for_other_stores(tmp_path):
    assert start_store_init("http://127.0.0.1:5000") is None
    assert start_store_init(None) is None
    assert sqlite_path("postgresql://x/y") is None
    with store_lock("http://127.0.0.1:5000"):  # a no-op, not an error
        pass


def test_a_tracker_waits_while_the_store_is_being_created(tmp_path):
    uri = default_tracking_uri(tmp_path)
    opened: list[float] = []
    with store_lock(uri):  # as the store_init process holds it
        held_at = time.monotonic()
        t = threading.Thread(target=lambda: (Tracker(uri, "exp"), opened.append(time.monotonic())))
        t.start()
        time.sleep(1.0)
        assert not opened  # blocked on the lock
        released_at = time.monotonic()
    t.join(timeout=300)
    assert opened and opened[0] >= released_at > held_at
    assert MlflowClient(uri).get_experiment_by_name("exp") is not None


def test_the_lock_is_released_when_its_holder_dies(tmp_path):
    uri = default_tracking_uri(tmp_path)
    pid = os.fork()
    if pid == 0:  # a creator killed while it holds the lock
        fd = os.open(lock_path(sqlite_path(uri)), os.O_RDWR | os.O_CREAT)
        fcntl.flock(fd, fcntl.LOCK_EX)
        os.kill(os.getpid(), 9)
    os.waitpid(pid, 0)
    done = threading.Event()

    def take() -> None:
        with store_lock(uri):
            done.set()

    threading.Thread(target=take, daemon=True).start()
    assert done.wait(10)
