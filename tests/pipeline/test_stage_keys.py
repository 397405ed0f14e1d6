"""Stage cache keys: a change re-runs exactly the stages it affects."""

import os
from pathlib import Path

from evr1.config import load_config
from evr1.pipeline import stage_key
from evr1.pipeline.results import StageResult

ROOT = Path(__file__).resolve().parents[2]


def _keys(tmp_path, *overrides):
    cfg = load_config(ROOT / "conf/tiny.yaml", [f"run.root={tmp_path}", *overrides])
    up = [StageResult(stage="x", uri="u", content_hash="h")]
    return {stage: stage_key(stage, cfg, up) for stage in ("ingest", "model", "cache", "train", "merge", "eval")}


def test_each_change_reaches_only_its_stages(tmp_path):
    base = _keys(tmp_path)
    assert base == _keys(tmp_path)  # stable
    eval_change = _keys(tmp_path, "eval.max_new_tokens=7")
    assert [s for s in base if base[s] != eval_change[s]] == ["eval"]
    algo_change = _keys(tmp_path, "algorithm.clip_ratio_high=0.28")
    assert [s for s in base if base[s] != algo_change[s]] == ["train"]


def test_an_edited_data_file_misses(tmp_path):
    data = tmp_path / "train.jsonl"
    data.write_text("{}\n")
    override = f'data={{"train_files": ["{data}"]}}'
    before = _keys(tmp_path, override)["ingest"]
    data.write_text("{}\n{}\n")
    os.utime(data, ns=(1, 1))
    assert _keys(tmp_path, override)["ingest"] != before


def test_an_evaluation_with_failed_items_is_run_again_by_the_next_flow_run(tmp_path):
    import json

    from evr1.pipeline import eval_dir

    cfg = load_config(ROOT / "conf/tiny.yaml", [f"run.root={tmp_path}"])
    model = StageResult(stage="model", uri="m", content_hash="weights")
    key = lambda: stage_key("eval", cfg, [model], "heldout")  # noqa: E731
    fresh = key()
    results = eval_dir(cfg, model, "heldout") / "results.jsonl"
    results.parent.mkdir(parents=True)
    results.write_text(json.dumps({"id": "a", "score": 1.0}) + "\n" + json.dumps({"id": "b", "error": "timeout"}) + "\n")
    failed = key()
    assert failed != fresh  # the cached result had a failure: a new run retries it
    with results.open("a") as f:
        f.write(json.dumps({"id": "b", "score": 0.0}) + "\n")  # the retry succeeded
    assert key() == failed  # the retry's result (cached under this key) is served from then on
    assert key() != fresh   # never the first result, which still had the failure


def test_checkpoint_fingerprint_and_init_from(tmp_path):
    """The checkpoint folder's name (`training_fingerprint`): a fork (`trainer.init_from`) trains in a
    folder of its own, per origin; unset, the option is not in the name at all, so adding it did not
    rename (and so orphan) any earlier run's checkpoints; steps stay out so raising them continues."""
    from evr1.pipeline import training_fingerprint
    from evr1.pipeline.keys import short_hash

    up = [StageResult(stage=s, uri="u", content_hash=s) for s in ("ingest", "cache", "model")]
    cfg = load_config(ROOT / "conf/tiny.yaml", [f"run.root={tmp_path}"])
    plain = training_fingerprint(cfg, *up)
    assert plain == training_fingerprint(load_config(ROOT / "conf/tiny.yaml", [f"run.root={tmp_path}", "trainer.steps=99"]), *up)
    forks = {training_fingerprint(load_config(ROOT / "conf/tiny.yaml", [f"run.root={tmp_path}", f"trainer.init_from={p}"]), *up)
             for p in ("a/step_000300", "b/step_000300")}
    assert len(forks) == 2 and plain not in forks
    step = load_config(ROOT / "conf/tiny.yaml", [f"run.root={tmp_path}", "trainer.lr_schedule=step",
                                                 "trainer.lr_milestones=[2]"])
    assert training_fingerprint(step, *up) != plain  # set, the later options do shape the weights
    # The name as it was computed before the option existed: the same sections, the trainer without it.
    data = cfg.model_dump(mode="json")
    trainer = {k: v for k, v in data["trainer"].items() if k not in ("steps", "save_every", "keep_last", "resume", "val_every",
                                                                     "val_limit", "collective_timeout_s", "init_from",
                                                                     "lr_milestones", "lr_gamma")}
    sections = {k: data[k] for k in ("algorithm", "rollout", "reward", "model", "cache")}
    assert plain == short_hash(sections, trainer, cfg.run.seed, "ingest", "cache", "model")
