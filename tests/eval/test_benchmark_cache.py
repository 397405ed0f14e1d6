"""`evr1 cache --benchmarks` decodes a benchmark's videos once into Lance; `evr1 eval` then reads them
from there (cache-only mode proves it: without a cache it refuses to start, saying how to build one)."""

import json
from pathlib import Path

from typer.testing import CliRunner

from evr1.cli import app
from evr1.data import make_synthetic
from evr1.models import make_tiny

ROOT = Path(__file__).resolve().parents[2]


def _videomme(tmp_path: Path) -> tuple[Path, Path]:
    rep = make_synthetic(tmp_path / "data" / "Video-MME", 3, seed=5, heldout=0, image_fraction=0.0, seconds=1.0)
    rows = [json.loads(line) for line in Path(rep.train_path).read_text().splitlines()]
    records = [{"problem_id": str(i), "problem": r["problem"].replace("<video>", "").strip(), "options": r["options"],
                "problem_type": "multiple choice", "solution": f"<answer>{r['answer']}</answer>",
                "path": "./" + r["videos"][0], "duration": "short", "domain": "x", "task_type": "y"}
               for i, r in enumerate(rows)]
    (tmp_path / "videomme.json").write_text(json.dumps(records))
    return tmp_path / "videomme.json", tmp_path / "data"


def test_benchmark_videos_are_cached_once_and_read_by_eval(tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)
    ann, data = _videomme(tmp_path)
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
