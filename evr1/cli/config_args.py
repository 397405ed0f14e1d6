"""How every command reads its config: the shared arguments, then load, validate and preflight.

A config or preflight problem is one line per problem on stderr (key, value, what was expected) and
exit 2, before any work starts.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from evr1.cli.app import _DEBUG, error_line

Overrides = Annotated[Optional[list[str]], typer.Argument(
    metavar="KEY=VALUE", show_default=False,
    help="config overrides, e.g. trainer.steps=8 'rollout.vllm={enforce_eager: true}' (`evr1 --help`: the syntax)")]
ConfigArg = Annotated[Path, typer.Argument(metavar="CONFIG", help="the YAML config (conf/*.yaml)", show_default=False)]


# What each command reads outside its config, checked before it starts work (`evr1.config.preflight`).
ALL = None
RUN_ONLY: tuple[str, ...] = ()
USES: dict[str, tuple[str, ...] | None] = {
    "run": ALL,
    "ingest": ("data", "model", "reward"),
    "cache": ("data", "model", "orchestration"),
    "train": ("data", "model", "reward", "trainer", "orchestration", "tracking"),
    "eval": ("eval", "reward", "orchestration", "tracking"),
    "plan": (),  # plans for a cluster: the model folder need not be on this machine
}


def load_checked(path: Path, overrides: list[str] | None, uses: tuple[str, ...] | None = RUN_ONLY):
    """The validated config, and with `uses` the paths and services it names checked too: every
    problem one line (key, value, what was expected), exit 2, before any work starts."""
    from evr1.config import ConfigError, load_config, preflight

    try:
        cfg = load_config(path, overrides or [])
    except ConfigError as e:
        if _DEBUG["on"]:
            raise
        print(f"evr1: config error: {error_line(e)}", file=sys.stderr)
        raise typer.Exit(2) from None
    refuse(path, preflight(cfg, uses) if uses != RUN_ONLY else [])
    return cfg


def refuse(path: Path, problems: list[str], hint: str | None = None) -> None:
    if problems and _DEBUG["on"]:
        from evr1.config import ConfigError

        raise ConfigError("\n".join(f"{path}: {line}" for line in problems))
    for line in problems:
        print(f"evr1: config error: {path}: {line}", file=sys.stderr)
    if problems and hint:
        print(f"evr1: hint: {hint}", file=sys.stderr)
    if problems:
        raise typer.Exit(2)
