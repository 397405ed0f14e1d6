"""Config loading: the shipped configs validate; typos and wrong types fail naming the key and the file."""

from pathlib import Path

import pytest

from evr1.config import ConfigError, apply_overrides, flat_params, load_config

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("name", sorted(p.name for p in (ROOT / "conf").glob("*.yaml")))
def test_shipped_configs_validate(name):
    cfg = load_config(ROOT / "conf" / name)
    assert cfg.run.name
    # Every shipped config opens with a comment saying what it is for and how to run it.
    assert (ROOT / "conf" / name).read_text().startswith("#")


def test_tiny_is_the_embedded_default():
    cfg = load_config(ROOT / "conf/tiny.yaml")
    assert cfg.model.path is None and cfg.model.tiny.family == "qwen3_vl"
    assert cfg.data.synth is not None
    assert (cfg.trainer.prompts_per_step * cfg.rollout.n) % cfg.trainer.world_size == 0


def _write(tmp_path, text):
    p = tmp_path / "c.yaml"
    p.write_text(text)
    return p


BASE = "data: {synth: {n: 8, heldout: 2}}\nmodel: {tiny: {family: qwen3_vl}}\n"


def test_unknown_key_names_key_and_file(tmp_path):
    p = _write(tmp_path, BASE + "trainer: {stepz: 3}\n")
    with pytest.raises(ConfigError) as e:
        load_config(p)
    assert "trainer.stepz" in str(e.value) and str(p) in str(e.value) and "unknown key" in str(e.value)


def test_wrong_type_names_key_and_file(tmp_path):
    p = _write(tmp_path, BASE + "trainer: {steps: many}\n")
    with pytest.raises(ConfigError) as e:
        load_config(p)
    assert "trainer.steps" in str(e.value) and str(p) in str(e.value)


def test_overrides_apply_and_are_validated(tmp_path):
    p = _write(tmp_path, BASE)
    cfg = load_config(p, ["trainer.steps=7", "rollout.n=2", "data.train_files=[a.jsonl]", "cache.max_pixels=null"])
    assert cfg.trainer.steps == 7 and cfg.rollout.n == 2 and cfg.data.train_files == ["a.jsonl"]
    assert cfg.cache.max_pixels is None
    with pytest.raises(ConfigError) as e:
        load_config(p, ["trainer.nope=1"])
    assert "trainer.nope" in str(e.value) and "overrides" in str(e.value)
    with pytest.raises(ConfigError):
        load_config(p, ["no-equals-sign"])


def test_reward_weights_must_sum_to_one(tmp_path):
    p = _write(tmp_path, BASE + "reward: {accuracy_weight: 0.8, format_weight: 0.1}\n")
    with pytest.raises(ConfigError, match="must be 1"):
        load_config(p)
    p = _write(tmp_path, BASE + "reward: {accuracy_weight: 1.5, format_weight: -0.5}\n")
    with pytest.raises(ConfigError, match="reward.accuracy_weight"):
        load_config(p)


def test_batch_must_split_evenly_over_ranks(tmp_path):
    p = _write(tmp_path, BASE + "trainer: {prompts_per_step: 3, world_size: 2}\nrollout: {n: 3}\n")
    with pytest.raises(ConfigError, match="divisible by trainer.world_size"):
        load_config(p)
    p = _write(tmp_path, BASE + "trainer: {prompts_per_step: 4, world_size: 2, mini_batch_size: 3}\nrollout: {n: 3}\n")
    with pytest.raises(ConfigError, match="mini_batch_size"):
        load_config(p)


@pytest.mark.parametrize("section, message", [
    ("rollout: {n: 1}", "n must be at least 2"),
    ("rollout: {temperature: 0}", "temperature 0"),
    ("algorithm: {use_kl_loss: true, use_kl_in_reward: true}", "choose one"),
    ("algorithm: {adv_estimator: gdpo, use_kl_in_reward: true, use_kl_loss: false}", "gdpo"),
    ("algorithm: {overlong_buffer_len: 100}\nrollout: {max_new_tokens: 64}", "overlong_buffer_len"),
    ("rollout: {top_k: -2}", "rollout.top_k"),
])
def test_settings_that_would_train_on_nothing_or_twice_are_refused(tmp_path, section, message):
    with pytest.raises(ConfigError, match=message):
        load_config(_write(tmp_path, BASE + section + "\n"))


def test_missing_file_and_bad_yaml(tmp_path):
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(tmp_path / "absent.yaml")
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(_write(tmp_path, "data: [unclosed\n"))


def test_apply_overrides_does_not_mutate_and_flat_params(tmp_path):
    data = {"a": {"b": 1}}
    out = apply_overrides(data, ["a.c.d=2"])
    assert data == {"a": {"b": 1}} and out == {"a": {"b": 1, "c": {"d": 2}}}
    params = flat_params(load_config(_write(tmp_path, BASE)))
    assert params["trainer.steps"] == "4" and params["model.tiny.family"] == "qwen3_vl"


# Every value issue 15 found to wreck a run, refused at load time with its key (and, for the
# cross-field rules, both keys named).
@pytest.mark.parametrize(
    ("overrides", "named"),
    [
        (["cache.timeout_s=-5"], "cache.timeout_s"),
        (["cache.timeout_s=0"], "cache.timeout_s"),
        (["cache.max_frames=0"], "cache.max_frames"),
        (["cache.min_frames=0"], "cache.min_frames"),
        (["reward.timeout_s=-1"], "reward.timeout_s"),
        (["eval.limit=-1"], "eval.limit"),
        (["eval.limit=0"], "eval.limit"),
        (["cache.fps=-2"], "cache.fps"),
        (["cache.fps=.nan"], "cache.fps"),
        (["cache.min_frames=16", "cache.max_frames=8"], "min_frames (16) must not exceed max_frames (8)"),
        (["cache.min_pixels=5000", "cache.max_pixels=100"], "min_pixels (5000) must not exceed max_pixels (100)"),
        (["cache.image_min_pixels=9", "cache.image_max_pixels=4"], "image_min_pixels (9) must not exceed"),
        (["cache.max_pixels=0"], "cache.max_pixels"),
        (["trainer.lr=.inf"], "trainer.lr"),
        (["trainer.lr=-1e-5"], "trainer.lr"),
        (["trainer.steps=true"], "trainer.steps"),
        (["trainer.steps=1.5"], "trainer.steps"),
        (["rollout.n=true"], "rollout.n"),
        (["data.max_prompt_tokens=0"], "data.max_prompt_tokens"),
        (["run.name=../../escape"], "run.name"),
        (["run.name=/tmp/elsewhere"], "run.name"),
        (["run.name=~/elsewhere"], "run.name"),
        (["run.name=a/../../b"], "run.name"),
        (["run.name="], "run.name"),
    ],
)
def test_values_that_wreck_a_run_are_refused(tmp_path, overrides, named):
    p = _write(tmp_path, BASE)
    with pytest.raises(ConfigError) as e:
        load_config(p, overrides)
    assert named in str(e.value)


def test_sane_edges_still_load(tmp_path):
    cfg = load_config(_write(tmp_path, BASE), ["eval.limit=1", "cache.min_frames=8", "cache.max_frames=8",
                                               "run.name=sweep/a", "trainer.lr=1", "cache.fps=0.5"])
    assert cfg.eval.limit == 1 and cfg.run_dir() == Path(cfg.run.root) / "sweep" / "a"
    assert load_config(_write(tmp_path, BASE), ["eval.limit=null"]).eval.limit is None


def test_duplicate_yaml_keys_are_refused_with_their_line(tmp_path):
    p = _write(tmp_path, BASE + "trainer:\n  steps: 3\n  lr: 1.0e-5\n  steps: 9\n")
    with pytest.raises(ConfigError) as e:
        load_config(p)
    assert "duplicate key 'steps' on line 6 (first on line 4)" in str(e.value) and str(p) in str(e.value)
    p = _write(tmp_path, BASE + "trainer: {steps: 3}\ntrainer: {steps: 4}\n")
    with pytest.raises(ConfigError, match="duplicate key 'trainer' on line 4"):
        load_config(p)


def test_tiny_model_sizes_are_checked_and_change_the_model(tmp_path):
    from evr1 import pipeline

    with pytest.raises(ConfigError, match="hidden_sise"):
        load_config(ROOT / "conf/learning.yaml", ["model.tiny.sizes={hidden_sise: 32}"])
    cfg = load_config(ROOT / "conf/tiny.yaml", [f"run.root={tmp_path}", "tracking.enabled=false",
                                                 "model.tiny.sizes={num_hidden_layers: 1}"])
    default = load_config(ROOT / "conf/tiny.yaml", [f"run.root={tmp_path}", "tracking.enabled=false"])
    sized, plain = pipeline.stage_model(cfg), pipeline.stage_model(default)
    assert sized.uri != plain.uri and sized.content_hash != plain.content_hash
    assert '"num_hidden_layers": 1' in (Path(sized.uri) / "config.json").read_text()


@pytest.mark.parametrize("text", ["", "# only a comment\n", "---\n"])
def test_an_empty_config_file_says_so_and_names_the_sections_it_needs(tmp_path, text):
    """Issue 36: an empty file said "Field required" twice without naming a key."""
    path = tmp_path / "empty.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as e:
        load_config(path)
    assert str(e.value) == f"{path}: the config file is empty: it needs at least the sections data and model"


def test_missing_sections_and_keys_are_named(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("run: {name: x}\n")
    with pytest.raises(ConfigError) as e:
        load_config(path, ["data.synth.n=4"])
    assert "missing the section model" in str(e.value) and "Field required" not in str(e.value)
    assert len(str(e.value).splitlines()) == 1
