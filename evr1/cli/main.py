"""The `evr1` command: the whole DAG (`run`) or any one stage on its own.

An error ends the command with one line on stderr naming what is wrong (file, record, field or key)
and exit code 1 (2 for a config error); `evr1 --debug ...` (or EVR1_DEBUG=1) shows the traceback.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import sys
import time
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
# Prefect's client-side telemetry (and its first-run notice on a terminal): off like the server's above.
os.environ.setdefault("DO_NOT_TRACK", "1")
# Progress bars of internal model saves and loads (tiny model, checkpoints, actors): nothing to act on.
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")

from evr1.cli import prefect_server  # noqa: E402
from evr1.cli.app import _ARGV, _DEBUG, HELP, _App, _Typer, error_line, examples  # noqa: E402,F401 (_DEBUG: tests)
from evr1.cli.config_args import RUN_ONLY, USES, ConfigArg, Overrides, load_checked, refuse  # noqa: E402
from evr1.cli.run_support import (SPAWNED_ENV, STARTED_ENV, _close_killed_runs, _process_started,  # noqa: E402
                                  _startup_spans, _tool, quiet_prefect)


app = _App(add_completion=False, no_args_is_help=True, help=HELP, pretty_exceptions_show_locals=False,
           epilog=examples(
               "# the tiny demo: train and evaluate a tiny model on synthetic videos, on the CPU",
               "evr1 run",
               "evr1 run conf/tiny.yaml trainer.steps=8 run.name=longer",
               "# the config as resolved, every default included",
               "evr1 config conf/qwen3vl_8b.yaml trainer.world_size=16",
               "# does it fit the GPUs? (and if not, what would)",
               "evr1 plan conf/long_video.yaml --gpu-memory-gib 80",
               "evr1 eval conf/tiny.yaml models:/evr1-policy@candidate",
               "# the Prefect and MLflow UIs",
               "evr1 services up",
               "evr1 COMMAND --help"))
console = Console()


@app.callback()
def _main(debug: Annotated[bool, typer.Option("--debug", help="show the full traceback of an error")] = False
          ) -> None:
    if debug:
        _DEBUG["on"] = True


FORCEABLE = ("ingest", "model", "cache", "train", "merge", "eval")  # the stage tasks' names
@app.command(epilog=examples(
    "# conf/tiny.yaml: a tiny model on synthetic videos, CPU",
    "evr1 run",
    "# more steps: training resumes from its checkpoint",
    "evr1 run conf/tiny.yaml trainer.steps=8",
    "evr1 run conf/qwen3vl_8b.yaml 'data.train_files=\\[/data/train.jsonl]' orchestration.ray_address=auto",
    "# evaluate again instead of serving it from the cache",
    "evr1 run conf/tiny.yaml --force eval",
    "# where the time to the first step went",
    "evr1 run conf/tiny.yaml --timings"))
def run(config: Annotated[Path, typer.Argument(metavar="CONFIG", help="the YAML config (conf/*.yaml)")] = Path("conf/tiny.yaml"),
        overrides: Overrides = None,
        force: Annotated[Optional[list[str]], typer.Option(
            "--force", metavar="STAGE",
            help="run STAGE again instead of serving it from the cache (repeat for several; `all`: every "
                 "stage); stages: " + ", ".join(FORCEABLE))] = None,
        timings: Annotated[bool, typer.Option(
            "--timings", help="at the end, the time to the first training step phase by phase (start-up, "
                              "Prefect, each stage, Ray, the actors, the first step's parts); every run writes "
                              "them to <run folder>/timings.json")] = False) -> None:
    """Run the whole train-and-eval DAG as a Prefect flow.

    Ingest, frame cache, GRPO training, merge, evaluation. A finished stage is served from the cache on
    a rerun, a training resumes from its latest checkpoint; Ctrl-C stops it within seconds and prints
    the command that resumes. The terminal shows a bar per long stage and a status line for each
    stretch without one; Prefect's own log lines go to <run folder>/logs/prefect.log (and the Prefect UI)."""
    from evr1.cli import interrupt

    cfg = load_checked(config, overrides, RUN_ONLY if interrupt.in_child() else USES["run"])  # the parent checked
    unknown = sorted(set(force or []) - set(FORCEABLE) - {"all"})
    if unknown:
        print(f"evr1: error: --force {', '.join(unknown)}: not a stage (stages: {', '.join(FORCEABLE)}, or all)",
              file=sys.stderr)
        raise typer.Exit(2)
    if not interrupt.in_child():  # the flow runs in a child of its own session (Ctrl-C: cli/interrupt.py)
        os.environ[STARTED_ENV] = str(_process_started())
        os.environ[SPAWNED_ENV] = str(time.time())
        if cfg.tracking.enabled:  # a new MLflow store is created while the child starts Prefect
            from evr1.tracking.store_init import default_tracking_uri, start_store_init

            start_store_init(cfg.tracking.uri or default_tracking_uri(cfg.run_dir()),
                             log=cfg.run_dir() / "logs" / "mlflow-store-init.log")
        code = interrupt.supervise(_ARGV, cfg.run_dir())
        if code == 130 and cfg.tracking.enabled:
            _close_killed_runs(cfg)
        raise typer.Exit(code)
    interrupt.quiet_on_interrupt(cfg.run_dir() / "interrupt.log")
    from evr1.tracking import progress

    _startup_spans(progress)
    root = cfg.run_dir()
    os.environ.setdefault("PREFECT_LOGGING_HANDLERS_CONSOLE_LEVEL", "WARNING")  # read when Prefect is imported
    from prefect.settings import PREFECT_FLOWS_HEARTBEAT_FREQUENCY, temporary_settings

    from flows.train_and_eval import train_and_eval

    quiet_prefect(root / "logs" / "prefect.log")

    served = bool(os.environ.get("PREFECT_API_URL"))
    progress.lead_in("Prefect: " + ("connecting to the server, creating the flow run" if served else
                                    "starting its temporary API server, creating the flow run"))
    try:
        prefect_server.adopt_early()  # started by __main__ while this process imported (cli/prefect_server.py)
        with temporary_settings({PREFECT_FLOWS_HEARTBEAT_FREQUENCY: None}), \
                progress.sinks(progress.StatusFile(os.environ[interrupt.STATUS_ENV])):
            results = train_and_eval(str(config), list(overrides or []),
                                     force=True if "all" in (force or []) else list(force or []))
    except Exception:  # the error's own line follows (evr1's handler); first, where to read the rest
        if (root / "summary.md").exists():
            print(f"evr1: run summary (what ran, what failed and why): {root / 'summary.md'}; "
                  f"Prefect's log: {root / 'logs' / 'prefect.log'}", file=sys.stderr)
        raise
    finally:
        progress.end_lead_in()
        from evr1.tracking import timings as timing

        with contextlib.suppress(OSError):
            timing.write(progress.TIMELINE, root / "timings.json")
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
    console.print(f"logs:         {root / 'logs' / 'prefect.log'} (Prefect's), timings: {root / 'timings.json'}")
    if timings:
        console.print("\n".join(timing.report(progress.TIMELINE)), highlight=False, soft_wrap=True)


@app.command("config", epilog=examples("evr1 config conf/tiny.yaml trainer.steps=3",
                                       "evr1 config conf/long_video.yaml 'rollout.vllm={enforce_eager: true}'"))
def show_config(config: Annotated[Path, typer.Argument(metavar="CONFIG", help="the YAML config (conf/*.yaml)")]
                = Path("conf/tiny.yaml"), overrides: Overrides = None) -> None:
    """Print the resolved config (file + overrides + every default) as YAML, after validation."""
    import yaml

    cfg = load_checked(config, overrides)
    print(yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False), end="")


@app.command(epilog=examples(
    "evr1 plan conf/long_video.yaml --gpu-memory-gib 80",
    "# does not fit: the smallest change that does",
    "evr1 plan conf/long_video.yaml --gpu-memory-gib 24",
    "evr1 plan conf/qwen3vl_8b.yaml --world-size 16 --separate cache.max_frames=256"))
def plan(config: ConfigArg, overrides: Overrides = None,
         gpu_memory_gib: Annotated[float, typer.Option(help="memory of one GPU, GiB")] = 80.0,
         world_size: Annotated[Optional[int], typer.Option(help="default: trainer.world_size")] = None,
         video_size: Annotated[str, typer.Option(help="source frame HEIGHTxWIDTH before the pixel budget")] = "720x1280",
         prompt_text_tokens: Annotated[int, typer.Option(help="text tokens of the question")] = 128,
         colocated: Annotated[Optional[bool], typer.Option("--colocated/--separate", help="the rollout engine shares "
                                                           "each rank's GPU (adds rollout.vllm's memory share) or has "
                                                           "a GPU of its own; default: rollout.placement")] = None,
         gpus: Annotated[Optional[int], typer.Option(help="the cluster's GPUs: refuse (exit 1) a placement that "
                                                          "needs more, as the run would")] = None,
         gpus_per_node: Annotated[Optional[int], typer.Option(help="with --gpus: GPUs per node (default: all on one)")]
         = None) -> None:
    """Memory per GPU for the config's model, frames and pixel budget, with and without sequence
    parallelism, and the Ray placement of the ranks and the rollout worker (GPUs, bundles).

    When the config's own setup does not fit, the smallest change that does: a higher sequence-parallel
    degree, more GPUs, or fewer frames. No GPU, Ray or model weights needed (a known checkpoint's
    shapes are built in)."""
    from evr1.train.plan import plan_for_config

    cfg = load_checked(config, overrides, USES["plan"])
    h, w = (int(x) for x in video_size.lower().split("x"))
    print(plan_for_config(cfg, gpu_gib=gpu_memory_gib, world_size=world_size, source_hw=(h, w),
                          prompt_text=prompt_text_tokens, colocated=colocated))
    if gpus is not None:  # the run's own check (evr1/train/placement.py), against the cluster described
        from evr1.train import placement

        mode = None if colocated is None else ("colocated" if colocated else "separate")
        resources = placement.plan_resources(cfg, world_size=world_size, mode=mode)
        per = gpus_per_node or gpus
        nodes = [{"Alive": True, "Resources": {"GPU": float(min(per, gpus - k))}} for k in range(0, gpus, per)]
        try:
            placement.check(resources, {"GPU": float(gpus)}, nodes)
        except placement.PlacementError as e:
            print(f"\nevr1: error: {e}", file=sys.stderr)
            raise typer.Exit(1) from None
        print(f"\nplacement: fits {gpus} GPUs ({len(nodes)} node{'s' if len(nodes) > 1 else ''})")
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


@app.command(epilog=examples("evr1 ingest conf/tiny.yaml",
                             "evr1 ingest conf/qwen3vl_8b.yaml 'data.train_files=\\[/data/a.jsonl, /data/b.jsonl]'"))
def ingest(config: ConfigArg, overrides: Overrides = None) -> None:
    """Validate the configured dataset into Lance samples + rejects (each rejected record with its reason)."""
    from evr1.pipeline import stage_ingest

    console.print(stage_ingest(load_checked(config, overrides, USES["ingest"])).summary())


@app.command(epilog=examples("evr1 cache conf/tiny.yaml", "evr1 cache conf/tiny.yaml cache.max_frames=16",
                             "evr1 cache conf/nightly.yaml --benchmarks"))
def cache(config: ConfigArg, overrides: Overrides = None,
          benchmarks: Annotated[bool, typer.Option("--benchmarks", help="cache the videos of eval.benchmarks "
                                                   "(into eval.frames_uri) instead of the training data")] = False,
          model_dir: Annotated[Optional[Path], typer.Option(help="the model whose family's rules apply "
                                                            "(default: model.path or the tiny model)")] = None) -> None:
    """Build the Lance frame cache: the ingested samples, or the evaluation benchmarks' videos."""
    from evr1 import pipeline
    from evr1.pipeline.results import StageResult

    cfg = load_checked(config, overrides, USES["cache"])
    if benchmarks:
        model = StageResult(stage="model", uri=str(model_dir)) if model_dir else pipeline.stage_model(cfg)
        console.print(pipeline.stage_cache_benchmarks(cfg, model).summary())
        return
    samples = pipeline.stage_ingest(cfg)
    console.print(pipeline.stage_cache(cfg, samples, pipeline.stage_model(cfg)).summary())


@app.command(epilog=examples("evr1 train conf/tiny.yaml trainer.steps=4", "# then",
                             "evr1 merge runs/tiny/checkpoints/FINGERPRINT/step_000004 runs/tiny/merged/mine"))
def train(config: ConfigArg, overrides: Overrides = None) -> None:
    """Ingest, cache and train (resuming from the run folder's latest checkpoint)."""
    from evr1 import pipeline

    cfg = load_checked(config, overrides, USES["train"])
    samples, base = pipeline.stage_ingest(cfg), pipeline.stage_model(cfg)
    frames = pipeline.stage_cache(cfg, samples, base)
    console.print(pipeline.stage_train(cfg, samples, frames, base).summary())


@app.command(epilog=examples("evr1 merge runs/tiny/checkpoints/FINGERPRINT/step_000004 runs/tiny/merged/mine",
                             "# then", "evr1 eval conf/tiny.yaml runs/tiny/merged/mine"))
def merge(checkpoint: Annotated[Path, typer.Argument(metavar="CHECKPOINT", show_default=False,
                                                     help="a checkpoint folder: <run folder>/checkpoints/<fingerprint>/step_000004")],
          out: Annotated[Path, typer.Argument(metavar="OUT", show_default=False,
                                              help="where the Hugging Face model directory goes")],
          base_model: Annotated[Optional[Path], typer.Option(
              help="the model training started from (its processor and config); default: the one the "
                   "checkpoint names")] = None) -> None:
    """Merge a sharded checkpoint into a Hugging Face model directory (safetensors, config, processor)."""
    from evr1.train.merge import merge_checkpoint

    res = merge_checkpoint(checkpoint, out, base_model=base_model)
    console.print(f"merged {res.num_parameters} parameters into {res.model_dir} (sha {res.weights_sha256}, "
                  f"{res.weights_verified} tensors equal to the trained ones, "
                  f"max logit diff {res.max_logit_diff} against the probe computed on {res.probe_device})")


@app.command("eval", epilog=examples(
    "# the newest registered version",
    "evr1 eval conf/tiny.yaml models:/evr1-policy@candidate",
    "# version 3",
    "evr1 eval conf/tiny.yaml models:/evr1-policy/3",
    "# a merged model directory",
    "evr1 eval conf/tiny.yaml runs/tiny/merged/FOLDER",
    "evr1 eval conf/nightly.yaml /models/Qwen3-VL-8B-Instruct --benchmark mvbench --benchmark videomme",
    "# the benchmark names",
    "evr1 benchmarks"))
def eval_(config: ConfigArg,
          model: Annotated[str, typer.Argument(
              metavar="MODEL", show_default=False,
              help="a Hugging Face model directory (`evr1 run` merges its trained model into <run folder>/merged/), "
                   "or a registered version in the config's MLflow registry: models:/<name>@<alias>, "
                   "models:/<name>/<version>, models:/<name> (its `candidate`)")],
          overrides: Overrides = None,
          benchmark: Annotated[list[str] | None, typer.Option(metavar="NAME", help="registry name (`evr1 benchmarks` lists them); "
                                                                    "repeat for several (default: eval.benchmarks)")] = None) -> None:
    """Evaluate a model directory or a registered version (models:/...) on benchmarks.

    Each benchmark's items are answered by MODEL through one engine, scored
    with the benchmark's official metric, a table per benchmark and one for the suite (files under
    <run folder>/eval/, metrics in MLflow; a registered version is tagged with its scores). Resumable:
    a rerun scores only the items that have no result yet. `heldout` and `test` are the config's own
    held-out and test splits."""
    from evr1 import pipeline
    from evr1.eval.heldout import uses_run_samples
    from evr1.eval.reference import guess_model
    from evr1.eval.report import suite_table
    from evr1.eval.runner import EvalSummary
    from evr1.pipeline.results import StageResult

    from evr1.config import preflight

    cfg = load_checked(config, overrides, USES["eval"])
    names = benchmark or cfg.eval.benchmarks
    needs_data = uses_run_samples(list(names))  # the run's held-out or test split
    resolved = _eval_model(cfg, config, model)  # before any data is made: a missing model says so at once
    refuse(config, preflight(cfg, ("data",)) if needs_data else [])
    samples = pipeline.stage_ingest(cfg) if needs_data else StageResult(stage="ingest", uri="")
    frames = pipeline.stage_cache(cfg, samples, resolved) if needs_data else StageResult(stage="cache", uri="")
    summaries = []
    for res in pipeline.stage_eval_suite(cfg, resolved, samples, frames, list(names)):  # one engine for all
        console.print(Path(res.extra["table"]).read_text())
        summaries.append(EvalSummary(**json.loads(Path(res.extra["summary"]).read_text())))
    console.print(suite_table(summaries, reference_model=cfg.eval.reference_model or guess_model(resolved.uri)))


def _eval_model(cfg, config: Path, model: str):
    """MODEL of `evr1 eval` as the stage result the evaluation takes: a registered version resolved in
    the config's tracking store, or a model directory checked; a problem exits 2 with what to do."""
    from evr1.pipeline.keys import short_hash
    from evr1.pipeline.results import StageResult
    from evr1.tracking import MODEL_URI_PREFIX, default_tracking_uri, resolve_model_uri

    from evr1.config.preflight import model_folder_problem

    if model.startswith(MODEL_URI_PREFIX):
        uri = cfg.tracking.uri or default_tracking_uri(cfg.run_dir())
        try:
            name, version, folder, sha = resolve_model_uri(uri, model)
        except (LookupError, ValueError) as e:
            refuse(config, [f"MODEL={error_line(e)}"], hint=_train_first(cfg))
        problem = model_folder_problem(f"MODEL={model} →", str(folder))
        refuse(config, [problem] if problem else [])
        # The weights' hash names the results folder, as the flow's evaluation of the merged model does.
        return StageResult(stage="model", uri=str(folder), version=int(version), extra={"name": name},
                           content_hash=sha or short_hash(uri, name, version))
    problem = model_folder_problem("MODEL", model)
    refuse(config, [problem] if problem else [], hint=_train_first(cfg))
    return StageResult(stage="model", uri=model)


def _train_first(cfg) -> str:
    """Where models to evaluate come from, and those this config's run folder already has."""
    merged = cfg.run_dir() / "merged"
    found = sorted((p for p in merged.glob("*") if (p / "config.json").is_file()), key=lambda p: p.stat().st_mtime)
    have = (f"merged models in {merged}: {', '.join(p.name for p in found[-3:])}" if found
            else f"no merged model in {merged} yet: train first (`evr1 run CONFIG`, or `evr1 train` then `evr1 merge`)")
    name = cfg.tracking.register_model
    registered = f"; a registered version: models:/{name}@candidate" if name else ""
    return f"MODEL is a Hugging Face model directory{registered}. {have[0].upper()}{have[1:]}."


@app.command(epilog=examples("evr1 benchmarks", "evr1 benchmarks --markdown > catalogue.md"))
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


@app.command(epilog=examples("evr1 synth data/synth --n 64 --heldout 16",
                             "evr1 run conf/tiny.yaml 'data.train_files=\\[data/synth/train.jsonl]' "
                             "'data.eval_files=\\[data/synth/heldout.jsonl]' data.data_root=data/synth"))
def synth(out: Annotated[Path, typer.Argument(metavar="OUT", show_default=False, help="the folder to write")],
          n: Annotated[int, typer.Option(help="number of samples (train + held-out)")] = 48,
          heldout: Annotated[int, typer.Option(help="how many of them go to the held-out split")] = 16,
          seed: Annotated[int, typer.Option(help="random seed (videos, questions, answers)")] = 0) -> None:
    """Write a synthetic video QA dataset (MP4s + JSONL train/held-out splits)."""
    from evr1.data.synth import make_synthetic

    rep = make_synthetic(out, n, seed=seed, heldout=heldout)
    console.print(rep.model_dump_json(indent=2))


@app.command("make-tiny", epilog=examples("evr1 make-tiny models/tiny-qwen3 --family qwen3_vl",
                                          "evr1 make-tiny models/tiny-vllm --for-vllm --size hidden_size=128",
                                          "# then", "evr1 run conf/tiny.yaml model.path=models/tiny-qwen3"))
def make_tiny(out: Annotated[Path, typer.Argument(metavar="OUT", show_default=False, help="the model folder to write")],
              family: Annotated[str, typer.Option(help="qwen2_vl | qwen2_5_vl | qwen3_vl")] = "qwen3_vl",
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


from evr1.cli.services_cmd import services_app  # noqa: E402

app.add_typer(services_app, name="services")

if __name__ == "__main__":
    app()
