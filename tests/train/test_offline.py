"""Mixed offline-online training and readable rollouts, run for real: ingest → frame cache → one GRPO
step on Ray with a tiny Qwen2.5-VL, tracked in MLflow on SQLite.

One run covers the cases: a sample with a short trajectory, one with a trajectory longer than
rollout.max_new_tokens, one without a trajectory and one whose flag is false; the rollout and
validation tables land in MLflow."""

import json
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from evr1 import pipeline
from evr1.config import load_config
from evr1.models import load_adapter
from evr1.train import offline
from evr1.train.rollout_table import PROMPT_CHARS, shorten
from tests.train.conftest import letter_density_data, letter_density_overrides

ROOT = Path(__file__).resolve().parents[2]
SHORT = "eeee"  # the letter-density reward pays 1 for it
LONG = "xyz " * 40  # pays 0, and is far longer than max_new_tokens = 8


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("offline")
    d = letter_density_data(tmp)
    records = [json.loads(line) for line in d["train"].read_text().splitlines()][:4]
    records[0].update(has_offline_trajectory=True, offline_output=SHORT)
    records[1].update(has_offline_trajectory=True, offline_output=LONG)
    records[3].update(has_offline_trajectory=False, offline_output=SHORT)  # the flag decides, not the text
    d["train"].write_text("\n".join(json.dumps(r) for r in records) + "\n")
    cfg = load_config(ROOT / "conf/tiny.yaml", [
        f"run.root={tmp}", "run.name=offline", "cache.workers=0", *letter_density_overrides(d),
        "data.offline_key=offline_output", "algorithm.offline_ratio=1.0", "model.tiny.family=qwen2_5_vl",
        "trainer.warmup_sft_steps=0", "trainer.steps=1", "trainer.prompts_per_step=4", "rollout.n=2",
        "trainer.world_size=1", "trainer.micro_batch_size=8", "rollout.max_new_tokens=8", "trainer.save_every=0",
        "trainer.val_every=1", "trainer.val_limit=2", "tracking.register_model=null"])
    samples = pipeline.stage_ingest(cfg)
    model = pipeline.stage_model(cfg)
    frames = pipeline.stage_cache(cfg, samples, model)
    result = pipeline.stage_train(cfg, samples, frames, model)
    tr = pipeline.tracker(cfg)
    client = MlflowClient(tr.uri)
    exp = client.get_experiment_by_name(tr.experiment)
    (train_run,) = client.search_runs([exp.experiment_id], "tags.`evr1.stage` = 'train'")
    return {"records": records, "model": Path(model.uri), "run": train_run, "client": client, "tmp": tmp,
            "result": result, "heldout": d["heldout"], "cfg": cfg, "stages": (samples, frames, model)}


def _table(run, name: str) -> list[dict]:
    path = run["client"].download_artifacts(run["run"].info.run_id, name, str(run["tmp"]))
    table = json.loads(Path(path).read_text())
    return [dict(zip(table["columns"], row)) for row in table["data"]]


@pytest.mark.slow
def test_offline_trajectories_replace_the_last_response(run):
    adapter = load_adapter(run["model"])
    ids = {r["problem_id"]: r for r in run["records"]}
    short_len = len(adapter.tokenizer.encode(SHORT, add_special_tokens=False)) + 1  # + the turn's eos
    metrics = run["run"].data.metrics

    # 4 groups of 2: two trajectories mixed in, one cut at max_new_tokens; rewards and lengths apart.
    assert metrics["offline/share"] == pytest.approx(2 / 8)
    assert metrics["offline/truncated"] == 1
    assert metrics["reward/offline_accuracy"] == pytest.approx(0.5)  # "eeee" pays 1, "xyz …" pays 0
    assert metrics["response/offline_length_mean"] == pytest.approx((short_len + 8) / 2)

    rows = _table(run, "rollouts/step_000001.json")
    assert len(rows) == 8 and {r["step"] for r in rows} == {1}
    online = [r for r in rows if not r["offline"]]  # the table holds the whole step here: the online six
    assert metrics["response/online_length_mean"] == pytest.approx(sum(r["length"] for r in online) / 6)
    assert metrics["reward/online_overall"] == pytest.approx(sum(r["reward_overall"] for r in online) / 6)
    off = {r["sample_id"]: r for r in rows if r["offline"]}
    assert set(off) == {run["records"][0]["problem_id"], run["records"][1]["problem_id"]}
    short, long = off[run["records"][0]["problem_id"]], off[run["records"][1]["problem_id"]]
    assert short["response"] == SHORT and short["length"] == short_len and not short["truncated"]
    cut = adapter.decode(adapter.tokenizer.encode(LONG, add_special_tokens=False)[:8])
    assert long["response"] == cut and long["length"] == 8 and long["truncated"]
    # The trajectory is trained on: in its group of 2 it earns more than the online answer, so its advantage is positive.
    partner = [r for r in rows if r["sample_id"] == short["sample_id"] and not r["offline"]]
    assert len(partner) == 1 and short["reward_accuracy"] > partner[0]["reward_accuracy"]
    assert short["advantage"] > 0 > partner[0]["advantage"]
    assert all(r["prompt"] == shorten(ids[r["sample_id"]]["problem"], PROMPT_CHARS) for r in rows)

    validation = _table(run, "validation/step_000001.json")
    heldout = [json.loads(line) for line in Path(run["heldout"]).read_text().splitlines()][:2]
    assert [r["answer"] for r in validation] == [str(h["answer"]) for h in heldout]  # val_limit 2, in order


def test_which_samples_get_their_trajectory_is_reproducible():
    ids = [f"s{i}" for i in range(2000)]
    picked = [offline.chosen(i, seed=0, step=3, ratio=0.25) for i in ids]
    assert picked == [offline.chosen(i, seed=0, step=3, ratio=0.25) for i in ids]  # a resumed run agrees
    assert 0.2 < sum(picked) / len(ids) < 0.3
    assert picked != [offline.chosen(i, seed=0, step=4, ratio=0.25) for i in ids]  # not the same samples every step
    assert all(offline.chosen(i, seed=0, step=1, ratio=1.0) for i in ids[:10])
    assert offline.trajectory({"extra": {"has_offline_trajectory": True, "t": " "}}, "t") is None
    assert offline.trajectory({"extra": '{"has_offline_trajectory": true, "t": "ok"}'}, "t") == "ok"


@pytest.mark.slow
def test_a_fork_names_its_origin_in_mlflow(run):
    """`trainer.init_from` through the train stage: the fork trains one step more in a checkpoint folder
    of its own, and its MLflow train run names the checkpoint it started from."""
    origin = Path(run["result"].uri)
    cfg = run["cfg"]
    fork = cfg.model_copy(update={"trainer": cfg.trainer.model_copy(update={"steps": 2, "init_from": str(origin)})})
    result = pipeline.stage_train(fork, *run["stages"])
    assert result.version == 2 and result.extra["forked_from"] == str(origin)
    assert Path(result.uri).parent != origin.parent and origin.exists()
    exp = run["client"].get_experiment_by_name(pipeline.tracker(cfg).experiment)
    (forked,) = run["client"].search_runs([exp.experiment_id], f"tags.`evr1.in.forked_from` = '{origin}'")
    assert forked.info.run_id != run["run"].info.run_id and forked.data.params["trainer.init_from"] == str(origin)
