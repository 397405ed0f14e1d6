"""`evr1 --help` and every command's help, as a new user reads them: the override syntax and examples,
flags without a value type beside them, a help text for every argument and option, and `evr1 eval`
saying what it evaluates and that it takes registered versions (models:/...)."""

import typer
from typer.testing import CliRunner

from evr1.cli.main import app

runner = CliRunner()


def _commands():
    """(command path, click command) for the root, every command and every sub-group's commands."""
    root = typer.main.get_command(app)
    out, todo = [], [((), root)]
    while todo:
        path, cmd = todo.pop(0)
        out.append((path, cmd))
        for name, sub in sorted(getattr(cmd, "commands", {}).items()):
            todo.append(((*path, name), sub))
    return out


def _help(path) -> str:
    result = runner.invoke(app, [*path, "--help"], terminal_width=100)
    assert result.exit_code == 0, result.output
    return result.output


def test_every_argument_and_option_has_help_text():
    missing, seen = [], 0
    for path, cmd in _commands():
        ctx = cmd.make_context(" ".join(("evr1", *path)), ["--help"], resilient_parsing=True)
        for param in cmd.get_params(ctx):
            seen += 1
            if not (getattr(param, "help", None) or "").strip():
                missing.append(f"evr1 {' '.join(path)}: {param.name}")
    assert not missing, missing
    assert seen > 50
    assert len(_commands()) >= 15  # root, 12 commands, services and its 3


def test_help_shows_examples_and_no_value_type_on_flags():
    for path, cmd in _commands():
        text = _help(path)
        assert "Examples" in text and "$ evr1 " in text, f"evr1 {' '.join(path)} --help has no examples"
        assert "<bool>" not in text and "<list[str]>" not in text, f"evr1 {' '.join(path)} --help:\n{text}"
    flags = _help(["make-tiny"])
    line = next(ln for ln in flags.splitlines() if "--for-vllm" in ln)
    assert "<" not in line  # a flag takes no value


def test_root_help_explains_the_override_syntax():
    text = " ".join(_help([]).split())  # the terminal's wrapping undone
    for needle in ("KEY=VALUE", "section.key", "read as YAML", "trainer.steps=20", "'data.train_files=[a.jsonl, b.jsonl]'",
                   "'rollout.vllm={enforce_eager: true}'", "replaces the whole section", "rollout.vllm.enforce_eager=true",
                   "evr1 config CONFIG KEY=VALUE", "$ evr1 run"):
        assert needle in text, needle
    run = " ".join(_help(["run"]).split())
    assert "[CONFIG] [KEY=VALUE]..." in run and "--force STAGE" in run.replace("│", "").replace("  ", " ")


def test_eval_help_says_what_it_evaluates_and_takes_registered_versions():
    text = " ".join(_help(["eval"]).split())
    for needle in ("Evaluate a model directory or a registered version", "models:/<name>@<alias>",
                   "models:/<name>/<version>", "merged/", "$ evr1 eval conf/tiny.yaml models:/evr1-policy@candidate",
                   "official metric", "Resumable"):
        assert needle in text, needle


def test_plan_help_says_it_suggests_what_fits():
    text = " ".join(_help(["plan"]).split())
    assert "the smallest change that does" in text and "$ evr1 plan conf/long_video.yaml --gpu-memory-gib 24" in text
