"""The `evr1` command's plumbing: the Typer app class whose errors end in one line, help rendering
(docstrings reflowed, flags without value types, example epilogs), and the state every command
shares (`--debug`, the command line). The commands themselves are in `evr1/cli/main.py`."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time

import typer
from typer.core import TyperCommand, TyperGroup

_IMPORTED_AT = time.time()
_DEBUG = {"on": os.environ.get("EVR1_DEBUG", "") not in ("", "0")}
_ARGV: list[str] = []  # the command line this process was given (after the program name)


def error_line(exc: BaseException) -> str:
    """One line for a user: the original error (Ray's wrapper unwrapped), its lines joined; the type
    is named unless the message is one of ours (a ValueError / LookupError subclass says what it is)."""
    cause = getattr(exc, "cause", None)
    if isinstance(cause, BaseException):
        exc = cause
    text = "; ".join(line.strip() for line in str(exc).splitlines() if line.strip()) or repr(exc)
    ours = type(exc).__module__.startswith("evr1.") or type(exc) in (ValueError, LookupError)
    return text if ours else f"{type(exc).__name__}: {text}"


def _main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


def _terminated(signum: int, frame) -> None:
    raise SystemExit(128 + signum)


def _no_type(ctx) -> None:
    return None


def _plain(params: list) -> list:
    """No type label (`<bool>`, `<list[str]>`) beside a flag or the overrides: a flag takes no value,
    and the overrides' metavar says what they are."""
    for p in params:
        if getattr(p, "is_flag", False) or getattr(p, "name", None) == "overrides":
            p.display_type_rich = _no_type
    return params


def _reflow(text: str | None) -> str | None:
    """A docstring's paragraphs each on one line: rich help keeps every line break it is given, so
    source-wrapped lines would come out ragged; the terminal wraps them instead."""
    if not text:
        return text
    import inspect

    return "\n\n".join(" ".join(line.strip() for line in para.splitlines())
                        for para in inspect.cleandoc(text).split("\n\n"))


class _Command(TyperCommand):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.help = _reflow(self.help)

    def get_params(self, ctx):
        return _plain(super().get_params(ctx))


class _Group(TyperGroup):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.help = _reflow(self.help)

    def get_params(self, ctx):
        return _plain(super().get_params(ctx))


class _Typer(typer.Typer):
    """Commands of `_Command` (flags shown without a value type), help in rich markup."""

    def __init__(self, **kwargs):
        super().__init__(cls=_Group, rich_markup_mode="rich", **kwargs)

    def command(self, *args, **kwargs):
        kwargs.setdefault("cls", _Command)
        return super().command(*args, **kwargs)


class _App(_Typer):
    """A Typer app whose uncaught errors print one line (the traceback only with --debug)."""

    def __call__(self, *args, **kwargs):
        _ARGV[:] = list(kwargs.get("args") or (args[0] if args else None) or sys.argv[1:])
        # SIGTERM unwinds like Ctrl-C: open MLflow runs close KILLED, Ray and the frame cache shut down.
        previous = signal.signal(signal.SIGTERM, _terminated) if _main_thread() else None
        try:
            return super().__call__(*args, **kwargs)
        except KeyboardInterrupt:
            if _DEBUG["on"]:
                raise
            print("evr1: interrupted", file=sys.stderr)
            sys.exit(130)
        except Exception as exc:
            if _DEBUG["on"]:
                raise
            print(f"evr1: error: {error_line(exc)} (rerun with evr1 --debug for the traceback)", file=sys.stderr)
            sys.exit(1)
        finally:
            if previous is not None:
                signal.signal(signal.SIGTERM, previous)


HELP = """The `evr1` command: the whole train-and-eval DAG (`run`) or any one stage on its own.

[bold]Overrides[/bold]: every command that reads a config takes [cyan]KEY=VALUE[/cyan] after it. KEY
is section.key (section.sub.key for nested ones); VALUE is read as YAML: [cyan]trainer.steps=20[/cyan],
[cyan]model.path=/models/Qwen3-VL-8B-Instruct[/cyan], [cyan]'data.train_files=\\[a.jsonl, b.jsonl]'[/cyan],
[cyan]trainer.mini_batch_size=null[/cyan], [cyan]'rollout.vllm={enforce_eager: true}'[/cyan] (a mapping
replaces the whole section, unnamed keys take their defaults; to change one key name it:
[cyan]rollout.vllm.enforce_eager=true[/cyan]). Quote values with spaces, brackets or braces.
`evr1 config CONFIG KEY=VALUE...` prints what they resolve to.

An error ends the command with one line on stderr naming what is wrong (file, record, field or key)
and exit code 1 (2 for a config error); `evr1 --debug ...` (or EVR1_DEBUG=1) shows the traceback."""


def examples(*lines: str) -> str:
    """A help epilog: `Examples`, one command per line; a line `# ...` is a comment on the next command."""
    out = ["[bold]Examples[/bold]"]
    for line in lines:
        out.append(f"  [dim]{line}[/dim]" if line.startswith("#") else f"  $ {line}")
    return "\n".join(out)
