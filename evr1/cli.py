"""The `evr1` command: the whole DAG (`run`) or any one stage on its own."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")

app = typer.Typer(add_completion=False, no_args_is_help=True, help=__doc__)
console = Console()

Overrides = Annotated[Optional[list[str]], typer.Argument(help="overrides: section.key=value")]


def _config(path: Path, overrides: list[str] | None):
    from evr1.config import ConfigError, load_config

    try:
        return load_config(path, overrides or [])
    except ConfigError as e:
        console.print(f"[red]config error[/red]\n{e}")
        raise typer.Exit(2) from None


@app.command()
def run(config: Path = typer.Argument(Path("conf/tiny.yaml")), overrides: Overrides = None) -> None:
    """Run the whole train-and-eval DAG as a Prefect flow."""
    cfg = _config(config, overrides)
    from prefect.settings import PREFECT_FLOWS_HEARTBEAT_FREQUENCY, temporary_settings

    from flows.train_and_eval import train_and_eval

    with temporary_settings({PREFECT_FLOWS_HEARTBEAT_FREQUENCY: None}):
        results = train_and_eval(str(config), list(overrides or []))
    root = cfg.run_dir()
    console.rule("[bold green]evr1: done")
    for r in results.values():
        console.print(r.summary())
    if "eval" in results:
        console.print("\n" + Path(results["eval"].extra["table"]).read_text())
    uri = cfg.tracking.uri or f"sqlite:///{root / 'mlflow.db'}"
    console.print(f"run folder:   {root}")
    console.print(f"MLflow UI:    .venv/bin/mlflow ui --backend-store-uri {uri}   (then http://127.0.0.1:5000)")
    console.print("Prefect UI:   .venv/bin/prefect server start   (then http://127.0.0.1:4200; start it before "
                  "`evr1 run` to see the flow runs there)")


@app.command("config")
def show_config(config: Path = typer.Argument(Path("conf/tiny.yaml")), overrides: Overrides = None) -> None:
    """Print the resolved config (file + overrides + every default) as YAML, after validation."""
    import yaml

    cfg = _config(config, overrides)
    print(yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False), end="")


@app.command()
def ingest(config: Path, overrides: Overrides = None) -> None:
    """Validate the configured dataset into Lance samples + rejects."""
    from evr1.pipeline import stage_ingest

    console.print(stage_ingest(_config(config, overrides)).summary())


@app.command()
def cache(config: Path, overrides: Overrides = None,
          benchmarks: Annotated[bool, typer.Option("--benchmarks", help="cache the videos of eval.benchmarks "
                                                   "(into eval.frames_uri) instead of the training data")] = False,
          model_dir: Annotated[Optional[Path], typer.Option(help="the model whose family's rules apply "
                                                            "(default: model.path or the tiny model)")] = None) -> None:
    """Build the Lance frame cache: the ingested samples, or the evaluation benchmarks' videos."""
    from evr1 import pipeline
    from evr1.results import StageResult

    cfg = _config(config, overrides)
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

    cfg = _config(config, overrides)
    samples, base = pipeline.stage_ingest(cfg), pipeline.stage_model(cfg)
    frames = pipeline.stage_cache(cfg, samples, base)
    console.print(pipeline.stage_train(cfg, samples, frames, base).summary())


@app.command()
def merge(checkpoint: Path, out: Path, base_model: Annotated[Optional[Path], typer.Option()] = None) -> None:
    """Merge a sharded checkpoint into a Hugging Face model directory."""
    from evr1.merge import merge_checkpoint

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
    from evr1.results import StageResult

    cfg = _config(config, overrides)
    names = benchmark or cfg.eval.benchmarks
    needs_data = "heldout" in names
    samples = pipeline.stage_ingest(cfg) if needs_data else StageResult(stage="ingest", uri="")
    model = StageResult(stage="model", uri=str(model_dir))
    frames = pipeline.stage_cache(cfg, samples, model) if needs_data else StageResult(stage="cache", uri="")
    summaries = []
    for name in names:
        res = pipeline.stage_eval(cfg, model, samples, frames, name)
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
              seed: Annotated[int, typer.Option()] = 0) -> None:
    """Build a tiny random-weight model of a Qwen-VL family, offline, as a Hugging Face directory."""
    from evr1.models import make_tiny as build

    console.print(f"tiny {family} model written to {build(family, out, seed=seed)}")


if __name__ == "__main__":
    app()
