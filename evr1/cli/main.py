"""The `evr1` command: the whole DAG (`run`) or any one stage on its own.

An error ends the command with one line on stderr naming what is wrong (file, record, field or key)
and exit code 1 (2 for a config error); `evr1 --debug ...` (or EVR1_DEBUG=1) shows the traceback.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import sys
import threading
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
# Progress bars of internal model saves and loads (tiny model, checkpoints, actors): nothing to act on.
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")

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


class _App(typer.Typer):
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


app = _App(add_completion=False, no_args_is_help=True, help=__doc__, pretty_exceptions_show_locals=False)
console = Console()


@app.callback()
def _main(debug: Annotated[bool, typer.Option("--debug", help="show the full traceback of an error")] = False
          ) -> None:
    if debug:
        _DEBUG["on"] = True


FORCEABLE = ("ingest", "model", "cache", "train", "merge", "eval")  # the stage tasks' names
Overrides = Annotated[Optional[list[str]], typer.Argument(help="overrides: section.key=value")]


# What each command reads outside its config, checked before it starts work (`evr1.config.preflight`).
ALL = None
RUN_ONLY: tuple[str, ...] = ()
USES: dict[str, tuple[str, ...] | None] = {
    "run": ALL,
    "ingest": ("data", "model", "reward"),
    "cache": ("data", "model", "orchestration"),
    "train": ("data", "model", "reward", "orchestration", "tracking"),
    "eval": ("eval", "reward", "orchestration", "tracking"),
    "plan": (),  # plans for a cluster: the model folder need not be on this machine
}


def _config(path: Path, overrides: list[str] | None, uses: tuple[str, ...] | None = RUN_ONLY):
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
    _refuse(path, preflight(cfg, uses) if uses != RUN_ONLY else [])
    return cfg


def _refuse(path: Path, problems: list[str]) -> None:
    if problems and _DEBUG["on"]:
        from evr1.config import ConfigError

        raise ConfigError("\n".join(f"{path}: {line}" for line in problems))
    for line in problems:
        print(f"evr1: config error: {path}: {line}", file=sys.stderr)
    if problems:
        raise typer.Exit(2)


@app.command()
def run(config: Path = typer.Argument(Path("conf/tiny.yaml")), overrides: Overrides = None,
        force: Annotated[Optional[list[str]], typer.Option(
            "--force", metavar="STAGE",
            help="run STAGE again instead of serving it from the cache (repeat for several; `all`: every "
                 "stage); stages: " + ", ".join(FORCEABLE))] = None) -> None:
    """Run the whole train-and-eval DAG as a Prefect flow."""
    from evr1.cli import interrupt

    cfg = _config(config, overrides, RUN_ONLY if interrupt.in_child() else USES["run"])  # the parent checked
    unknown = sorted(set(force or []) - set(FORCEABLE) - {"all"})
    if unknown:
        print(f"evr1: error: --force {', '.join(unknown)}: not a stage (stages: {', '.join(FORCEABLE)}, or all)",
              file=sys.stderr)
        raise typer.Exit(2)
    if not interrupt.in_child():  # the flow runs in a child of its own session (Ctrl-C: cli/interrupt.py)
        code = interrupt.supervise(_ARGV, cfg.run_dir())
        if code == 130 and cfg.tracking.enabled:
            _close_killed_runs(cfg)
        raise typer.Exit(code)
    interrupt.quiet_on_interrupt(cfg.run_dir() / "interrupt.log")
    from prefect.settings import PREFECT_FLOWS_HEARTBEAT_FREQUENCY, temporary_settings

    from flows.train_and_eval import train_and_eval

    from evr1.tracking import progress

    with temporary_settings({PREFECT_FLOWS_HEARTBEAT_FREQUENCY: None}), \
            progress.sinks(progress.StatusFile(os.environ[interrupt.STATUS_ENV])):
        results = train_and_eval(str(config), list(overrides or []),
                                 force=True if "all" in (force or []) else list(force or []))
    root = cfg.run_dir()
    console.rule("[bold green]evr1: done")
    for key, r in results.items():
        if key != "eval":  # "eval" is the first benchmark's result again (eval-<name> follows)
            console.print(r.summary())
    if "eval" in results:
        from rich.markdown import Markdown

        console.print(Markdown(Path(results["eval"].extra["table"]).read_text()))
    uri = cfg.tracking.uri or f"sqlite:///{root / 'mlflow.db'}"
    services = shlex.join([_tool("evr1"), "services", "up", str(config), *(overrides or [])])
    console.print(f"run folder:   {root}")
    console.print(f"run summary:  {root / 'summary.md'}   (UIs in one command: {services})")
    console.print(f"MLflow UI:    {_tool('mlflow')} ui --backend-store-uri {uri}   (then http://127.0.0.1:5000)")
    console.print(f"Prefect UI:   {_tool('prefect')} server start   (then http://127.0.0.1:4200; start it before "
                  "`evr1 run` to see the flow runs there)")


def _tool(name: str) -> str:
    """How to call `name` from here: bare when the PATH finds this interpreter's copy, else its path."""
    mine = Path(sys.executable).parent / name
    found = shutil.which(name)
    if mine.exists() and (found is None or Path(found).resolve() != mine.resolve()):
        return str(mine)
    return name


def _close_killed_runs(cfg) -> None:
    """MLflow runs an interrupted child could not close (it was killed) are closed KILLED now."""
    from evr1.tracking import Tracker, default_tracking_uri

    root = cfg.run_dir()
    Tracker(cfg.tracking.uri or default_tracking_uri(root), cfg.tracking.experiment,
            artifact_root=root / "mlartifacts").close_dead_runs(root)


@app.command("config")
def show_config(config: Path = typer.Argument(Path("conf/tiny.yaml")), overrides: Overrides = None) -> None:
    """Print the resolved config (file + overrides + every default) as YAML, after validation."""
    import yaml

    cfg = _config(config, overrides)
    print(yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False), end="")


@app.command()
def plan(config: Path, overrides: Overrides = None,
         gpu_memory_gib: Annotated[float, typer.Option(help="memory of one GPU, GiB")] = 80.0,
         world_size: Annotated[Optional[int], typer.Option(help="default: trainer.world_size")] = None,
         video_size: Annotated[str, typer.Option(help="source frame HEIGHTxWIDTH before the pixel budget")] = "720x1280",
         prompt_text_tokens: Annotated[int, typer.Option(help="text tokens of the question")] = 128,
         colocated: Annotated[Optional[bool], typer.Option("--colocated/--separate", help="the rollout engine shares "
                                                           "each rank's GPU (adds rollout.vllm's memory share) or has "
                                                           "a GPU of its own; default: rollout.placement")] = None) -> None:
    """Memory per GPU for the config's model, frames and pixel budget, with and without sequence
    parallelism, and the Ray placement of the ranks and the rollout worker (GPUs, bundles)."""
    from evr1.train.plan import plan_for_config

    cfg = _config(config, overrides, USES["plan"])
    h, w = (int(x) for x in video_size.lower().split("x"))
    print(plan_for_config(cfg, gpu_gib=gpu_memory_gib, world_size=world_size, source_hw=(h, w),
                          prompt_text=prompt_text_tokens, colocated=colocated))
    _plan_advice(config, list(overrides or []) + ([f"trainer.world_size={world_size}"] if world_size else []),
                 gpu_gib=gpu_memory_gib, video_size=video_size, prompt_text=prompt_text_tokens, colocated=colocated)


def _plan_advice(config: Path, overrides: list[str], *, gpu_gib: float, video_size: str, prompt_text: int,
                 colocated: bool | None) -> None:
    """Under the plan, when the config's own setup does not fit: the smallest change that does
    (evr1/cli/plan_advice.py), with the command that shows its plan."""
    from evr1.cli.plan_advice import advice_lines, smallest_fit
    from evr1.config import ConfigError

    h, w = (int(x) for x in video_size.lower().split("x"))
    try:
        verdict = smallest_fit(config, overrides, gpu_gib=gpu_gib, source_hw=(h, w), prompt_text=prompt_text,
                               colocated=colocated)
    except ConfigError as e:  # e.g. --world-size that the config's sequence-parallel degree does not divide
        print(f"\n(no advice: {error_line(e)})")
        return
    options = ["--gpu-memory-gib", f"{gpu_gib:g}"]
    if video_size != "720x1280":
        options += ["--video-size", video_size]
    if prompt_text != 128:
        options += ["--prompt-text-tokens", str(prompt_text)]
    if colocated is not None:
        options.append("--colocated" if colocated else "--separate")
    lines = advice_lines(verdict, [_tool("evr1"), "plan", str(config), *options, *overrides], gpu_gib)
    if lines:
        print("\n" + "\n".join(lines))


@app.command()
def ingest(config: Path, overrides: Overrides = None) -> None:
    """Validate the configured dataset into Lance samples + rejects."""
    from evr1.pipeline import stage_ingest

    console.print(stage_ingest(_config(config, overrides, USES["ingest"])).summary())


@app.command()
def cache(config: Path, overrides: Overrides = None,
          benchmarks: Annotated[bool, typer.Option("--benchmarks", help="cache the videos of eval.benchmarks "
                                                   "(into eval.frames_uri) instead of the training data")] = False,
          model_dir: Annotated[Optional[Path], typer.Option(help="the model whose family's rules apply "
                                                            "(default: model.path or the tiny model)")] = None) -> None:
    """Build the Lance frame cache: the ingested samples, or the evaluation benchmarks' videos."""
    from evr1 import pipeline
    from evr1.pipeline.results import StageResult

    cfg = _config(config, overrides, USES["cache"])
    if benchmarks:
        model = StageResult(stage="model", uri=str(model_dir)) if model_dir else pipeline.stage_model(cfg)
        console.print(pipeline.stage_cache_benchmarks(cfg, model).summary())
        return
    samples = pipeline.stage_ingest(cfg)
    console.print(pipeline.stage_cache(cfg, samples, pipeline.stage_model(cfg)).summary())


@app.command()
def train(config: Path, overrides: Overrides = None) -> None:
    """Ingest, cache and train (resuming from the run folder's latest checkpoint)."""
    from evr1 import pipeline

    cfg = _config(config, overrides, USES["train"])
    samples, base = pipeline.stage_ingest(cfg), pipeline.stage_model(cfg)
    frames = pipeline.stage_cache(cfg, samples, base)
    console.print(pipeline.stage_train(cfg, samples, frames, base).summary())


@app.command()
def merge(checkpoint: Path, out: Path, base_model: Annotated[Optional[Path], typer.Option()] = None) -> None:
    """Merge a sharded checkpoint into a Hugging Face model directory."""
    from evr1.train.merge import merge_checkpoint

    res = merge_checkpoint(checkpoint, out, base_model=base_model)
    console.print(f"merged {res.num_parameters} parameters into {res.model_dir} (sha {res.weights_sha256}, "
                  f"max logit diff {res.max_logit_diff})")


@app.command("eval")
def eval_(config: Path, model_dir: Path, overrides: Overrides = None,
          benchmark: Annotated[list[str] | None, typer.Option(help="registry name; repeat for several "
                                                                    "(default: eval.benchmarks)")] = None) -> None:
    """Evaluate a model directory on benchmarks (resumable: a rerun scores only what is missing)."""
    from evr1 import pipeline
    from evr1.eval.reference import guess_model
    from evr1.eval.report import suite_table
    from evr1.eval.runner import EvalSummary
    from evr1.pipeline.results import StageResult

    from evr1.config import preflight
    from evr1.config.preflight import model_folder_problem

    cfg = _config(config, overrides, USES["eval"])
    names = benchmark or cfg.eval.benchmarks
    needs_data = "heldout" in names
    _refuse(config, [p for p in [model_folder_problem("MODEL_DIR", str(model_dir))] if p]
            + (preflight(cfg, ("data",)) if needs_data else []))
    samples = pipeline.stage_ingest(cfg) if needs_data else StageResult(stage="ingest", uri="")
    model = StageResult(stage="model", uri=str(model_dir))
    frames = pipeline.stage_cache(cfg, samples, model) if needs_data else StageResult(stage="cache", uri="")
    summaries = []
    for res in pipeline.stage_eval_suite(cfg, model, samples, frames, list(names)):  # one engine for all
        console.print(Path(res.extra["table"]).read_text())
        summaries.append(EvalSummary(**json.loads(Path(res.extra["summary"]).read_text())))
    console.print(suite_table(summaries, reference_model=cfg.eval.reference_model or guess_model(str(model_dir))))


@app.command()
def benchmarks(markdown: Annotated[bool, typer.Option(help="the catalogue with deviations, as in docs/eval.md")] = False) -> None:
    """List the registered benchmarks: name, title, items in the shared file, official headline metric."""
    from evr1.eval.catalogue import definitions, headline_metric, markdown as catalogue

    if markdown:
        print(catalogue(), end="")
        return
    for b in definitions():
        aliases = f" (also {', '.join(b.aliases)})" if b.aliases else ""
        console.print(f"{b.name:18} {b.title}{aliases}: {b.expected_items or '?'} items, {headline_metric(b)}",
                      soft_wrap=True)


@app.command()
def synth(out: Path, n: Annotated[int, typer.Option(help="number of samples")] = 48,
          heldout: Annotated[int, typer.Option()] = 16, seed: Annotated[int, typer.Option()] = 0) -> None:
    """Write a synthetic video QA dataset (MP4s + JSONL train/held-out splits)."""
    from evr1.data.synth import make_synthetic

    rep = make_synthetic(out, n, seed=seed, heldout=heldout)
    console.print(rep.model_dump_json(indent=2))


@app.command("make-tiny")
def make_tiny(out: Path, family: Annotated[str, typer.Option(help="qwen2_vl | qwen2_5_vl | qwen3_vl")] = "qwen3_vl",
              seed: Annotated[int, typer.Option(help="weight seed")] = 0,
              init: Annotated[str, typer.Option(help="default | prompt_dependent (greedy outputs that depend "
                                                     "on the prompt, for comparing engines)")] = "default",
              for_vllm: Annotated[bool, typer.Option("--for-vllm", help="head_dim 32, which vLLM's CPU "
                                                     "attention needs (the defaults have 16)")] = False,
              size: Annotated[Optional[list[str]], typer.Option(
                  "--size", metavar="KEY=INT", help="override one of evr1.models.tiny.DEFAULT_SIZES "
                  "(repeat), e.g. --size hidden_size=128")] = None) -> None:
    """Build a tiny random-weight model of a Qwen-VL family, offline, as a Hugging Face directory."""
    from evr1.models import make_tiny as build
    from evr1.models.tiny import DEFAULT_SIZES, VLLM_SIZES

    sizes: dict = dict(VLLM_SIZES) if for_vllm else {}
    for item in size or []:
        key, sep, value = item.partition("=")
        if not sep or key not in DEFAULT_SIZES or not value.strip().lstrip("-").isdigit():
            print(f"evr1: error: --size {item!r}: expected KEY=INT with KEY one of {', '.join(sorted(DEFAULT_SIZES))}",
                  file=sys.stderr)
            raise typer.Exit(2)
        sizes[key] = int(value)
    console.print(f"tiny {family} model written to {build(family, out, seed=seed, init=init, **sizes)}")


services_app = typer.Typer(no_args_is_help=True, help="The Prefect server, a `local` worker and the MLflow UI on 127.0.0.1.")
app.add_typer(services_app, name="services")
StateDir = Annotated[Path, typer.Option("--state", help="where logs, pids and the Prefect database live")]


@services_app.command("up")
def services_up(config: Path = typer.Argument(Path("conf/tiny.yaml"), help="whose MLflow store the UI shows"),
                overrides: Overrides = None, state: StateDir = Path("runs/services"),
                prefect_port: Annotated[Optional[int], typer.Option(help="default: a free port")] = None,
                mlflow_port: Annotated[Optional[int], typer.Option(help="default: a free port")] = None,
                deploy: Annotated[bool, typer.Option(help="register the deployments of prefect.yaml")] = True) -> None:
    """Start the Prefect server, a process worker on the `local` pool and the MLflow UI; print the URLs."""
    from evr1.cli import services
    from evr1.tracking import default_tracking_uri

    cfg = _config(config, overrides)
    uri = cfg.tracking.uri or default_tracking_uri(cfg.run_dir())
    data = services.up(state, tracking_uri=uri, project=Path.cwd(), prefect_port=prefect_port,
                       mlflow_port=mlflow_port, deploy=deploy)
    console.print(f"Prefect UI: {data['urls']['prefect']}\nMLflow UI:  {data['urls']['mlflow']}  ({uri})")
    console.print(f"runs from this shell go to the server after:  export PREFECT_API_URL={data['api']}")
    console.print(f"logs and pids: {state.resolve()}   stop with: evr1 services down --state {state}")


@services_app.command("down")
def services_down(state: StateDir = Path("runs/services")) -> None:
    """Stop exactly what `evr1 services up` started (and their children)."""
    from evr1.cli import services

    stopped = services.down(state)
    console.print("\n".join(f"stopped {name} (pids {', '.join(map(str, pids))})" for name, pids in stopped.items())
                  or "nothing was running")


@services_app.command("status")
def services_status(state: StateDir = Path("runs/services")) -> None:
    """Which services `up` started still run, with their URLs and logs."""
    from evr1.cli import services

    found = services.status(state)
    for name, e in found.items():
        console.print(f"{name:15} {'running' if e['running'] else 'stopped':8} pid {e['pid']:>7}  "
                      f"{e.get('url', ''):28} {e['log']}")
    if not found:
        console.print("no services started from this state folder")


if __name__ == "__main__":
    app()
