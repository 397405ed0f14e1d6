"""Every user-facing error of the `evr1` command is one line on stderr naming the file, record or key;
the traceback only with `--debug`. Runs the real app in-process (as the installed script calls it)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import yaml

from evr1.cli.main import _DEBUG, app

ROOT = Path(__file__).resolve().parents[2]


def write_config(folder: Path, data: dict, **sections) -> Path:
    """A config in `folder` with the given data section, tracking off and the run folder inside `folder`."""
    cfg = yaml.safe_load((ROOT / "conf/tiny.yaml").read_text())
    cfg.update({"data": data, "run": {"name": "cli", "root": str(folder / "runs")}, "tracking": {"enabled": False},
                **sections})
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "run.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def evr1(capsys, *args: str) -> tuple[int, str]:
    """Run `evr1 args`; (exit code, stderr)."""
    with pytest.raises(SystemExit) as done:
        app(list(args), prog_name="evr1")
    return done.value.code or 0, capsys.readouterr().err


@pytest.fixture(autouse=True)
def _no_debug():
    _DEBUG["on"] = False
    yield
    _DEBUG["on"] = False


def record(**fields) -> str:
    return json.dumps({"problem": "What is 2+2?", "answer": "4", "problem_type": "numerical", **fields})


def test_data_errors_are_one_line_naming_the_file(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)  # relative data paths are read against the config's folder, not here
    conf = tmp_path / "conf"
    # A file that is not there, or not a file, is refused before ingest starts (exit 2, config error);
    # what ingest finds inside a file ends it with exit 1.
    cases = {
        "missing.jsonl": (2, "data.train_files[0]={conf}/missing.jsonl: no such file or folder"),
        "notes.csv": (1, "unsupported extension '.csv'"),
        "fifo.jsonl": (2, "data.train_files[0]={conf}/fifo.jsonl: expected a file or a folder, found a special file"),
        "empty.jsonl": (1, "no records in"),
        "bad.jsonl": (1, "all 1 records"),
    }
    conf.mkdir()
    (conf / "notes.csv").write_text("a\n")
    os.mkfifo(conf / "fifo.jsonl")
    (conf / "empty.jsonl").write_text("\n")
    (conf / "bad.jsonl").write_bytes(b'{"problem": "caf\xe9"}\n')
    for name, (want, words) in cases.items():
        path = write_config(conf, {"train_files": [name]})
        code, err = evr1(capsys, "ingest", str(path))
        assert code == want and err.count("\n") == 1, err
        assert words.format(conf=conf) in err and str(conf) in err, err


def test_relative_data_paths_follow_the_config_file(tmp_path, capsys, monkeypatch):
    conf = tmp_path / "project"
    conf.mkdir()
    (conf / "train.jsonl").write_text(record() + "\n")
    path = write_config(conf, {"train_files": ["train.jsonl"]})
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as done:
        app(["ingest", str(path)], prog_name="evr1")
    assert done.value.code in (0, None), capsys.readouterr()
    assert "accepted" in capsys.readouterr().out


def test_config_errors_are_one_line(tmp_path, capsys):
    path = write_config(tmp_path, {"synth": {"n": 4}})
    code, err = evr1(capsys, "config", str(path), "rollout.n=1")
    assert code == 2 and err.count("\n") == 1 and "rollout: n must be at least 2" in err, err
    assert "'algorithm'" not in err  # never the whole config
    (tmp_path / "latin1.yaml").write_bytes(b"run:\n  name: caf\xe9\n")
    code, err = evr1(capsys, "config", str(tmp_path / "latin1.yaml"))
    assert code == 2 and err.count("\n") == 1 and "latin1.yaml: cannot read config" in err, err


def test_debug_shows_the_traceback(tmp_path, capsys):
    path = write_config(tmp_path, {"train_files": ["missing.jsonl"]})
    with pytest.raises(ValueError, match="missing.jsonl: no such file or folder"):
        app(["--debug", "ingest", str(path)], prog_name="evr1")
