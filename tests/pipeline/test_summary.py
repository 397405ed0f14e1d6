"""The run summary table: every stage with its status, duration, headline metrics and outputs."""

import pytest

from evr1.pipeline.summary import StageRow, mlflow_run_url, render, write


def test_summary_lists_each_stage_with_status_duration_metrics_and_outputs(tmp_path):
    rows = [StageRow("ingest", "cached", 0.0, {"accepted": 4.0}, ["/runs/x/lance/samples (v2)"]),
            StageRow("train", "ran", 200.0, {"reward/overall": 0.25}, ["/runs/x/checkpoints/step_2"]),
            StageRow("merge", "failed", 1.5), StageRow("eval-heldout", "skipped")]
    md = render("x: run summary", rows, links={"MLflow run": mlflow_run_url("http://127.0.0.1:5000", "1", "abc")})
    assert "| ingest | cached | 0.0 s | accepted 4 | `/runs/x/lance/samples (v2)` |" in md
    assert "| train | ran | 3.3 min | reward/overall 0.25 |" in md
    assert "| merge | **failed** | 1.5 s |" in md and "| eval-heldout | not reached | – |" in md
    assert "1 ran (3.3 min), 1 reused, 1 failed." in md
    assert "- MLflow run: http://127.0.0.1:5000/#/experiments/1/runs/abc?workflowType=machine_learning" in md
    assert write(tmp_path, md).read_text() == md


def test_an_unknown_status_names_the_stage():
    with pytest.raises(ValueError, match="stage 'train': status 'done'"):
        StageRow("train", "done")


def test_a_failed_stage_says_why_and_a_resumed_one_says_where():
    rows = [StageRow("train", "ran", 10.0, note="resumed at step 3"),
            StageRow("merge", "failed", 1.0, note="checkpoint | step_3\nhas no weights")]
    md = render("x", rows)
    assert "| train | ran: resumed at step 3 | 10.0 s |" in md
    assert "| merge | **failed**: checkpoint \\| step_3 has no weights | 1.0 s |" in md


def test_an_eval_suite_failure_is_the_failing_benchmarks_not_every_benchmarks():
    """One task evaluates every benchmark: the benchmark its error names failed; the others read "not
    reached" with the reason, not "failed" with another benchmark's error (issue 35's screenshot)."""
    from tasks.stages import _row

    seen = {"status": "failed", "seconds": 0.3, "note": "mvbench: none of ['mvbench.json'] in /data"}
    rows = [_row(f"eval-{b}", None, seen, ["heldout", "mvbench"]) for b in ("heldout", "mvbench")]
    assert (rows[0].status, rows[0].note) == ("skipped", "the eval stage failed on mvbench")
    assert (rows[1].status, rows[1].seconds, rows[1].note) == ("failed", 0.3, seen["note"])
    other = _row("eval-heldout", None, {"status": "failed", "seconds": 1.0, "note": "CUDA out of memory"},
                 ["heldout", "mvbench"])
    assert other.status == "failed"  # an error naming no benchmark stays on every row
