"""`evr1 services up|down|status`: the Prefect server, a `local` worker and the MLflow UI on 127.0.0.1.

The commands only parse and print; `evr1.cli.services` starts, tracks and stops the processes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console

from evr1.cli.app import _Typer, examples
from evr1.cli.config_args import Overrides, load_checked

console = Console()

services_app = _Typer(no_args_is_help=True, help="The Prefect server, a `local` worker and the MLflow UI on 127.0.0.1.",
                      epilog=examples("evr1 services up conf/tiny.yaml", "evr1 services status", "evr1 services down"))
StateDir = Annotated[Path, typer.Option("--state", help="where logs, pids and the Prefect database live")]


@services_app.command("up", epilog=examples(
    "# conf/tiny.yaml's MLflow store",
    "evr1 services up",
    "evr1 services up conf/tiny.yaml run.name=longer --mlflow-port 5000",
    "# no deployments, no nightly schedule",
    "evr1 services up --no-deploy"))
def services_up(config: Annotated[Path, typer.Argument(metavar="CONFIG", help="whose MLflow store the UI shows")]
                = Path("conf/tiny.yaml"),
                overrides: Overrides = None, state: StateDir = Path("runs/services"),
                prefect_port: Annotated[Optional[int], typer.Option(help="default: a free port")] = None,
                mlflow_port: Annotated[Optional[int], typer.Option(help="default: a free port")] = None,
                deploy: Annotated[bool, typer.Option(help="register the deployments of prefect.yaml, among them "
                                                          "the nightly evaluation's cron schedule")] = True) -> None:
    """Start the Prefect server, a process worker on the `local` pool and the MLflow UI; print the URLs.

    Each step says what it does as it goes (the first start takes a minute: Prefect builds its database)."""
    from evr1.cli import services
    from evr1.tracking import default_tracking_uri

    cfg = load_checked(config, overrides)
    uri = cfg.tracking.uri or default_tracking_uri(cfg.run_dir())
    data = services.up(state, tracking_uri=uri, project=Path.cwd(), prefect_port=prefect_port,
                       mlflow_port=mlflow_port, deploy=deploy)
    console.print(f"Prefect UI: {data['urls']['prefect']}\nMLflow UI:  {data['urls']['mlflow']}  ({uri})")
    for d in data.get("deployments", []):
        when = f"on a schedule: {', '.join(d['schedules'])}" if d["schedules"] else "run on demand"
        console.print(f"deployment {d['entrypoint'].rsplit(':', 1)[-1].replace('_', '-')}/{d['name']}: {when}, "
                      f"work pool {d['pool']}" + (" (no worker started for it here)" if d["pool"] != "local" else ""))
    if any(d["schedules"] for d in data.get("deployments", [])):
        console.print("(the schedules run while the server and a worker of their pool run; `--no-deploy` "
                      "registers none)")
    console.print(f"runs from this shell go to the server after:  export PREFECT_API_URL={data['api']}")
    console.print(f"logs and pids: {state.resolve()}   stop with: evr1 services down --state {state}")


@services_app.command("down", epilog=examples("evr1 services down", "evr1 services down --state runs/services"))
def services_down(state: StateDir = Path("runs/services")) -> None:
    """Stop exactly what `evr1 services up` started (and their children)."""
    from evr1.cli import services

    stopped = services.down(state)
    console.print("\n".join(f"stopped {name} (pids {', '.join(map(str, pids))})" for name, pids in stopped.items())
                  or "nothing was running")


@services_app.command("status", epilog=examples("evr1 services status"))
def services_status(state: StateDir = Path("runs/services")) -> None:
    """Which services `up` started still run, with their URLs and logs."""
    from evr1.cli import services

    found = services.status(state)
    for name, e in found.items():
        console.print(f"{name:15} {'running' if e['running'] else 'stopped':8} pid {e['pid']:>7}  "
                      f"{e.get('url', ''):28} {e['log']}")
    if not found:
        console.print("no services started from this state folder")
