"""Rollout tables survive long runs: the 300th table of a run is logged and readable like the first."""

import json
from pathlib import Path

from evr1.tracking import Tracker


def test_hundreds_of_tables_in_one_run_are_all_logged(tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    tr = Tracker(uri, "tables", artifact_root=tmp_path / "artifacts")
    tr.start_parent("train")
    with tr.stage("train"):
        for step in range(1, 301):  # mlflow.log_table broke after ~130 of these (its run tag overflowed)
            tr.log_table([{"step": step, "response": "<answer>A</answer>", "offline": False}],
                         f"rollouts/step_{step:06d}.json")
        run_id = tr._stage_run_id
    for step in (1, 300):
        path = tr.client.download_artifacts(run_id, f"rollouts/step_{step:06d}.json", str(tmp_path / f"dl{step}"))
        table = json.loads(Path(path).read_text())
        assert table == {"columns": ["step", "response", "offline"], "data": [[step, "<answer>A</answer>", False]]}
