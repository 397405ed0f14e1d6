"""SIGTERM or Ctrl-C during an MLflow write: the write finishes first, so the runs still close KILLED.

The write below holds SQLite's write lock while the signal arrives, as MLflow's own session does
between its INSERT and COMMIT. Acted on inside the write, the signal's SystemExit would leave the lock
held (MLflow rolls back on Exception only) and closing the runs would fail with "database is locked"
(tests/e2e/test_kill.py failed that way once in CI)."""

import signal
import sqlite3
import time

import mlflow
import pytest

from evr1.tracking import Tracker, signals_held


def _terminated(signum, frame):
    raise SystemExit(128 + signum)


@pytest.fixture
def sigterm_exits():
    previous = signal.signal(signal.SIGTERM, _terminated)
    yield
    signal.signal(signal.SIGTERM, previous)


def test_a_signal_inside_held_code_is_acted_on_after_it(sigterm_exits):
    done = []
    with pytest.raises(SystemExit) as exc, signals_held():
        signal.raise_signal(signal.SIGTERM)
        done.append("after the signal")
    assert done == ["after the signal"] and exc.value.code == 128 + signal.SIGTERM
    assert signal.getsignal(signal.SIGTERM) is _terminated  # the handler is back


def test_sigterm_during_a_metrics_write_still_closes_the_runs_killed(tmp_path, monkeypatch, sigterm_exits):
    db = tmp_path / "mlflow.db"
    tr = Tracker(f"sqlite:///{db}", "signals", artifact_root=tmp_path / "artifacts")
    tr.start_parent("train")
    real = mlflow.log_metrics

    def locked_write(metrics, step=None):
        con = sqlite3.connect(db)
        con.execute("BEGIN IMMEDIATE")  # the write lock, as an uncommitted MLflow session holds it
        signal.raise_signal(signal.SIGTERM)
        time.sleep(0.05)  # a handler acting now would leave `con` (and its lock) in the traceback
        con.commit()
        con.close()
        real(metrics, step=step)

    monkeypatch.setattr(mlflow, "log_metrics", locked_write)
    start = time.monotonic()
    with pytest.raises(SystemExit) as exc, tr.stage("train"):
        run_id = tr.stage_run_id
        tr.log_metrics({"reward/overall": 0.5}, step=1)
        pytest.fail("SIGTERM was not acted on after the write")
    assert exc.value.code == 128 + signal.SIGTERM
    assert time.monotonic() - start < 4  # no wait on a lock (SQLite's busy timeout is 5 s)
    run = tr.client.get_run(run_id)
    assert run.info.status == "KILLED" and run.data.metrics == {"reward/overall": 0.5}
    assert tr.client.get_run(tr.parent_run_id).info.status == "KILLED"
