"""`evr1 cache --benchmarks` decodes a benchmark's videos once into Lance; `evr1 eval` then reads them
from there (cache-only mode proves it: without a cache it refuses to start, saying how to build one)."""

from pathlib import Path

from typer.testing import CliRunner

from evr1.cli.main import app
from evr1.models import make_tiny
from tests.synthetic_benchmark import videomme_on_synthetic

ROOT = Path(__file__).resolve().parents[2]


def test_benchmark_videos_are_cached_once_and_read_by_eval(tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)
    ann, data = videomme_on_synthetic(tmp_path, 3, seed=5)
    model = make_tiny("qwen3_vl", tmp_path / "model", seed=0)
    common = [f"run.root={tmp_path / 'runs'}", "tracking.enabled=false", "cache.workers=0", "eval.max_new_tokens=2",
              f"eval.files.videomme={ann}", f"eval.data_dir={data}", "eval.benchmarks=[videomme]"]
    runner = CliRunner()

    missed = runner.invoke(app, ["eval", "conf/tiny.yaml", str(model), *common, "cache.mode=cache-only",
                                 "run.name=nocache"])
    assert missed.exit_code != 0 and "evr1 cache <config> --benchmarks" in str(missed.exception)

    built = runner.invoke(app, ["cache", "conf/tiny.yaml", *common, "run.name=cached", "--benchmarks",
                                "--model-dir", str(model)])
    assert built.exit_code == 0, built.output
    assert "decoded=3" in built.output and "failed=0" in built.output
    again = runner.invoke(app, ["cache", "conf/tiny.yaml", *common, "run.name=cached", "--benchmarks",
                                "--model-dir", str(model)])
    assert "decoded=0" in again.output and "hits=3" in again.output  # incremental: nothing decoded twice

    hit = runner.invoke(app, ["eval", "conf/tiny.yaml", str(model), *common, "cache.mode=cache-only",
                              "run.name=cached"])
    assert hit.exit_code == 0, hit.output
    assert "3/3 scored, 0 failed" in hit.output
