"""A flow run whose `eval` stage failed (a benchmark's annotation file is not there yet) is retried AS THE
SAME FLOW RUN (`prefect flow-run retry`, which sets it Scheduled and runs it again, as the UI's retry
does). The task-run states show that ingest, cache, train and merge did not run again (their task runs
are the first attempt's, their outputs untouched), that the failed stage ran, and MLflow keeps one
parent run for both attempts with each earlier stage logged once."""

import os
import subprocess
import sys
from pathlib import Path

import lance
import pytest
from mlflow.tracking import MlflowClient
from prefect.states import State

from tests.synthetic_benchmark import videomme_on_synthetic

ROOT = Path(__file__).resolve().parents[2]


def _task_runs(flow_run_id) -> dict[str, list]:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

    with get_client(sync_client=True) as client:
        runs = client.read_task_runs(flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[flow_run_id])))
    by_stage: dict[str, list] = {}
    for r in sorted(runs, key=lambda r: r.created):
        by_stage.setdefault(r.name.rsplit("-", 1)[0], []).append(r)
    return by_stage


@pytest.mark.e2e
def test_retrying_the_same_failed_flow_run_runs_only_the_failed_stage_and_later(tmp_path, prefect_harness, monkeypatch):
    from prefect.client.orchestration import get_client
    from prefect.settings import PREFECT_API_URL

    from flows.train_and_eval import train_and_eval

    monkeypatch.chdir(ROOT)
    ann, data = videomme_on_synthetic(tmp_path, 2)
    # The annotation file is broken in the first attempt (a half-copied file: the flow's up-front checks
    # see a readable file, the eval stage cannot parse it) and whole in the retry.
    whole = ann.read_text()
    ann.write_text(whole[: len(whole) // 2])
    overrides = [f"run.root={tmp_path}", "run.name=rerun", "data.synth.n=4", "data.synth.heldout=2",
                 'eval.benchmarks=["heldout","videomme"]', f"eval.files.videomme={ann}", f"eval.data_dir={data}",
                 "trainer.steps=1", "trainer.warmup_sft_steps=0",
                 "trainer.prompts_per_step=2", "rollout.n=2",
                 "trainer.world_size=1", "rollout.max_new_tokens=4", "eval.max_new_tokens=4", "cache.workers=0"]

    first: State = train_and_eval("conf/tiny.yaml", overrides, return_state=True)
    assert first.is_failed()
    flow_run_id = first.state_details.flow_run_id
    samples = tmp_path / "rerun" / "lance" / "samples"
    version_after_first = lance.dataset(str(samples)).version
    before = _task_runs(flow_run_id)
    done = ("ingest", "model", "cache", "train", "merge")
    assert all(before[s][-1].state.is_completed() for s in done) and before["eval"][-1].state.is_failed()
    finished = {s: before[s][-1].end_time for s in done}
    checkpoint = Path(before["train"][-1].state.result().uri)
    checkpoint_mtime = checkpoint.stat().st_mtime_ns
    first_failed = before["eval"][-1].end_time

    ann.write_text(whole)  # the cause is fixed: the annotation file is whole now
    env = {**os.environ, "PREFECT_API_URL": PREFECT_API_URL.value()}
    retried = subprocess.run([str(Path(sys.executable).parent / "prefect"), "flow-run", "retry", str(flow_run_id),
                              "--entrypoint", "flows/train_and_eval.py:train_and_eval"], cwd=ROOT, env=env,
                             capture_output=True, text=True, timeout=900)
    assert retried.returncode == 0, retried.stdout[-3000:] + retried.stderr[-3000:]

    with get_client(sync_client=True) as client:
        flow_run = client.read_flow_run(flow_run_id)
    assert flow_run.state.is_completed() and flow_run.run_count == 2  # the same flow run, a second attempt
    after = _task_runs(flow_run_id)
    # the finished stages: not executed again (the first attempt's task run, or one served from the cache)
    for stage in done:
        assert all(r.state.name == "Cached" or r.end_time == finished[stage] for r in after[stage]), stage
    assert lance.dataset(str(samples)).version == version_after_first, "ingest ran again"
    assert checkpoint.stat().st_mtime_ns == checkpoint_mtime, "training wrote its checkpoint again"
    # the failed stage ran in the second attempt, and passed
    assert after["eval"][-1].state.name == "Completed" and after["eval"][-1].start_time > first_failed

    # one MLflow parent run for both attempts, holding every stage once
    client = MlflowClient(f"sqlite:///{tmp_path / 'rerun' / 'mlflow.db'}")
    exp = client.get_experiment_by_name("evr1-tiny")  # conf/tiny.yaml
    runs = client.search_runs([exp.experiment_id])
    parents = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    assert len(parents) == 1
    stages = sorted(r.data.tags.get("evr1.stage") for r in runs if "mlflow.parentRunId" in r.data.tags)
    assert all(stages.count(s) == 1 for s in done if s != "model") and "eval-videomme" in stages, stages
    assert {r.data.tags["mlflow.parentRunId"] for r in runs if r.info.run_id != parents[0].info.run_id} == \
        {parents[0].info.run_id}
    summary = (tmp_path / "rerun" / "summary.md").read_text()
    assert "| train | done in an earlier attempt |" in summary or "| train | cached |" in summary, summary
    assert "| eval-videomme | ran |" in summary
