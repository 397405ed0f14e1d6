"""Paths, model folders and services a config names are checked before any work starts."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from evr1.config import load_config, preflight
from evr1.config.preflight import model_folder_problem

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "conf" / "tiny.yaml"


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # closed again when the block ends: nothing listens there


def test_the_embedded_default_passes():
    assert preflight(load_config(TINY)) == []


def test_every_problem_is_one_line_naming_key_and_value(tmp_path):
    data = tmp_path / "data"
    data.mkdir()  # a folder of dataset files is a valid source
    os.mkfifo(tmp_path / "pipe.jsonl")
    cfg = load_config(TINY, ["data.synth=null",
                             f"data.train_files=[{tmp_path / 'gone.jsonl'},{data},{tmp_path / 'pipe.jsonl'}]",
                             f"model.path={tmp_path}", f"eval.files.videomme={tmp_path / 'ann.json'}",
                             f"reward.families=[{tmp_path / 'mine.py'}:score]"])
    problems = preflight(cfg)
    assert problems == [
        f"data.train_files[0]={tmp_path / 'gone.jsonl'}: no such file or folder",
        f"data.train_files[2]={tmp_path / 'pipe.jsonl'}: expected a file or a folder, found a special file",
        f"model.path={tmp_path}: not a Hugging Face model folder, it lacks config.json, a tokenizer "
        "(tokenizer.json or tokenizer_config.json or vocab.json), weights (*.safetensors)",
        f"reward.families[0]={tmp_path / 'mine.py'}: no such file",
        f"eval.files.videomme={tmp_path / 'ann.json'}: no such file",
    ]
    assert preflight(cfg, ("eval",)) == problems[-1:]  # a command checks only what it uses


def test_a_model_folder_needs_config_tokenizer_and_weights(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    (tmp_path / "tokenizer.json").write_text("{}")
    assert "weights" in model_folder_problem("model.path", str(tmp_path))
    (tmp_path / "model.safetensors").write_bytes(b"")
    assert model_folder_problem("model.path", str(tmp_path)) is None


def test_services_that_do_not_answer_are_named_within_seconds():
    port = _closed_port()
    cfg = load_config(TINY, [f"orchestration.ray_address=127.0.0.1:{port}", f"tracking.uri=http://127.0.0.1:{port}"])
    problems = preflight(cfg)  # each connect gives up after CONNECT_TIMEOUT_S
    assert [p.split(":")[0] for p in problems] == ["orchestration.ray_address=127.0.0.1", "tracking.uri=http"]
    assert all("nothing answers" in p or "no tracking server answers" in p for p in problems)


def test_a_service_that_answers_passes():
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        cfg = load_config(TINY, [f"orchestration.ray_address=ray://127.0.0.1:{port}"])
        assert preflight(cfg) == []


@pytest.mark.parametrize("command, overrides, key", [
    (["run"], ["data.synth=null", "data.train_files=[/nonexistent/train.jsonl]"], "data.train_files[0]"),
    (["train"], ["model.path=/tmp"], "model.path"),
    (["run"], ["orchestration.ray_address=127.0.0.1:{port}"], "orchestration.ray_address"),
])
def test_the_command_refuses_in_seconds_with_one_line(tmp_path, command, overrides, key):
    """The real CLI: exit 2 before Prefect, Ray or any stage starts; one line, no traceback."""
    overrides = [o.format(port=_closed_port()) for o in overrides]
    proc = subprocess.run([sys.executable, "-m", "evr1.cli", *command, str(TINY), f"run.root={tmp_path}", *overrides],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"evr1: config error: {TINY}: {key}="), proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout
    assert not (tmp_path / "tiny").exists()  # no stage ran: the run folder was never made
