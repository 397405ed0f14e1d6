"""`evr1 eval` takes a registered version (models:/<name>@<alias>, /<version>, or the name alone) from
the config's MLflow registry (SQLite, real MLflow), and says what to do when the model is not there."""

from pathlib import Path

import pytest
from typer.testing import CliRunner

from evr1.cli.main import app
from evr1.models import make_tiny
from evr1.tracking import Tracker, default_tracking_uri, resolve_model_uri

ROOT = Path(__file__).resolve().parents[2]
runner = CliRunner()


@pytest.fixture(scope="module")
def registry(tmp_path_factory):
    """A run folder whose MLflow registry holds two versions of `evr1-policy` (the second `candidate`)."""
    root = tmp_path_factory.mktemp("runs")
    run_dir = root / "tiny"
    uri = default_tracking_uri(run_dir)
    tr = Tracker(uri, "evr1", artifact_root=run_dir / "mlartifacts")
    tr.start_parent("tiny · test")
    folders = []
    for i in (1, 2):
        folder = make_tiny("qwen3_vl", run_dir / "merged" / f"m{i}", seed=i)
        with tr.stage("merge"):
            assert tr.register_model_dir(folder, "evr1-policy", weights_sha256=f"sha{i}") == str(i)
        folders.append(folder)
    return root, uri, folders


def test_model_uris_resolve_to_the_registered_folders(registry):
    _, uri, (first, second) = registry
    assert resolve_model_uri(uri, "models:/evr1-policy@candidate") == ("evr1-policy", "2", second, "sha2")
    assert resolve_model_uri(uri, "models:/evr1-policy/1") == ("evr1-policy", "1", first, "sha1")
    assert resolve_model_uri(uri, "models:/evr1-policy") == ("evr1-policy", "2", second, "sha2")
    with pytest.raises(LookupError, match=r"no alias 'best' \(aliases: candidate\)"):
        resolve_model_uri(uri, "models:/evr1-policy@best")
    with pytest.raises(LookupError, match=r"no version 7 \(versions: 1, 2\)"):
        resolve_model_uri(uri, "models:/evr1-policy/7")
    with pytest.raises(LookupError, match=r"no registered model 'other'.*registered: evr1-policy"):
        resolve_model_uri(uri, "models:/other@candidate")


def _eval(root: Path, model: str, *extra: str):
    return runner.invoke(app, ["eval", str(ROOT / "conf/tiny.yaml"), model, f"run.root={root}", *extra])


def test_eval_takes_a_registered_version_before_anything_else(registry):
    root, _, _ = registry
    # The version resolves (no MODEL problem); the run stops at the next check, the missing data file,
    # before any data is made or any model loaded.
    result = _eval(root, "models:/evr1-policy@candidate", "data.synth=null", f"data.train_files=[{root / 'none.jsonl'}]")
    assert result.exit_code == 2, result.output
    assert "MODEL" not in result.output and "none.jsonl" in result.output
    missing = _eval(root, "models:/evr1-policy@best")
    assert missing.exit_code == 2
    assert "MODEL=models:/evr1-policy@best: model 'evr1-policy' has no alias 'best' (aliases: candidate)" in missing.output
    assert not (root / "tiny" / "data").exists()  # nothing synthesised before the model was found


def test_eval_without_a_model_says_where_models_come_from(registry, tmp_path):
    root, _, _ = registry
    result = _eval(root, str(tmp_path / "nothing"))
    assert result.exit_code == 2
    out = " ".join(result.output.split())
    assert f"MODEL={tmp_path / 'nothing'}: expected a folder, none there" in out
    assert f"merged models in {root / 'tiny' / 'merged'}: m1, m2" in out.replace("Merged", "merged")
    assert "models:/evr1-policy@candidate" in out
    fresh = runner.invoke(app, ["eval", str(ROOT / "conf/tiny.yaml"), str(tmp_path / "nothing"), f"run.root={tmp_path}"])
    assert "train first (`evr1 run CONFIG`" in " ".join(fresh.output.split())
