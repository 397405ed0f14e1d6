"""A cached stage whose outputs were deleted runs again (and its cache entry is replaced), instead of
serving a result that points at nothing; `evr1 run --force STAGE` names a stage to run again."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
OVERRIDES = ["run.name=gone", "data.synth.n=4", "data.synth.heldout=2", "trainer.steps=1", "trainer.warmup_sft_steps=0",
             "trainer.prompts_per_step=2", "rollout.n=2", "trainer.world_size=1", "rollout.max_new_tokens=4",
             "eval.max_new_tokens=4", "cache.workers=0", "tracking.enabled=false"]


def _flow(root: Path):
    from flows.train_and_eval import train_and_eval

    cwd = os.getcwd()
    os.chdir(ROOT)
    try:
        state = train_and_eval("conf/tiny.yaml", [f"run.root={root}", *OVERRIDES], return_state=True)
    finally:
        os.chdir(cwd)
    assert state.is_completed(), state
    return state.result()


def _statuses(root: Path) -> dict[str, str]:
    rows = {}
    for line in (root / "gone" / "summary.md").read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("| ") and len(cells) == 5 and cells[0] not in ("stage", "---"):
            rows[cells[0]] = cells[1]
    return rows


def _remove(path: str) -> None:
    p = Path(path)
    shutil.rmtree(p) if p.is_dir() else p.unlink()


@pytest.mark.e2e
def test_each_stage_whose_outputs_are_gone_runs_again(tmp_path, prefect_harness):
    first = _flow(tmp_path)
    assert set(_statuses(tmp_path).values()) == {"ran"}
    again = "ran again (its cached outputs were gone)"
    # One stage's output at a time; the stages before and after it stay cached (same content, same keys).
    for stage, path in [("ingest", first["ingest"].uri), ("cache", first["cache"].uri),
                        ("train", first["train"].uri), ("merge", first["merge"].uri),
                        ("eval-heldout", first["eval-heldout"].extra["summary"])]:
        _remove(path)
        results = _flow(tmp_path)
        statuses = _statuses(tmp_path)
        assert statuses[stage] == again, (stage, statuses)
        assert {s for k, s in statuses.items() if k != stage} <= {"cached", again}, (stage, statuses)
        assert not results[stage].missing_outputs()
    assert _statuses(tmp_path)["train"] == "cached"  # the last rerun left every entry whole again


def test_force_names_a_stage_or_is_refused():
    proc = subprocess.run([sys.executable, "-m", "evr1.cli", "run", str(ROOT / "conf" / "tiny.yaml"), "--force", "trian"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.strip() == ("evr1: error: --force trian: not a stage (stages: ingest, model, cache, train, "
                                   "merge, eval, or all)")


def test_stage_results_name_their_missing_outputs(tmp_path):
    from evr1.pipeline.results import StageResult

    kept, gone = tmp_path / "kept.lance", tmp_path / "gone.lance"
    kept.mkdir()
    r = StageResult(stage="ingest", uri=str(kept), extra={"rejects_uri": str(gone), "fingerprint": "abc"})
    assert r.outputs() == [str(kept), str(gone)] and r.missing_outputs() == [str(gone)]
    assert StageResult(stage="model", uri="s3://bucket/model").missing_outputs() == []  # not ours to check


@pytest.mark.e2e
def test_table_artifacts_show_tags_as_written(prefect_harness):
    """The Prefect UI renders table cells as HTML: prompts and answers are escaped so their tags show."""
    from prefect import flow
    from prefect.artifacts import create_table_artifact
    from prefect.client.orchestration import get_client

    from tasks.stages import escaped_cells

    @flow
    def publish() -> str:
        return str(create_table_artifact(key="cells", table=escaped_cells(
            [{"prompt": "<video> Which way?", "response": "<answer>B</answer>", "reward": 1.0}])))

    artifact_id = publish()
    with get_client(sync_client=True) as client:
        (art,) = [a for a in client.read_artifacts() if str(a.id) == artifact_id]
    data = art.data if isinstance(art.data, list) else json.loads(art.data)
    assert data == [{"prompt": "&lt;video&gt; Which way?", "response": "&lt;answer&gt;B&lt;/answer&gt;", "reward": 1.0}]
