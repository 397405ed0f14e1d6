"""Read a learning run back from MLflow and plot held-out accuracy against step (docs/learning.md).

    .venv/bin/python -m research.learning.report runs/learning runs/learning-offline --out docs/learning.png

Each argument is a run folder (`run.root/run.name`) whose `mlflow.db` holds an `evr1 run`; the newest
`train` stage run is read. A fork (`trainer.init_from`) is read with its origins: the steps up to each
fork point come from the run that trained them (`lineage`). Prints, per run, the validation curve and
the figures research.learning.run reports (accuracy before RL, steps and seconds to the target).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
from mlflow.tracking import MlflowClient

from evr1.tracking import plots

STAGE_TAG = "evr1.stage"


def _client(run_dir: Path) -> MlflowClient:
    return MlflowClient(tracking_uri=f"sqlite:///{(run_dir / 'mlflow.db').resolve()}")


def stage_run(run_dir: Path, stage: str):
    """The newest MLflow run of one pipeline stage in a run folder."""
    client = _client(run_dir)
    experiments = [e.experiment_id for e in client.search_experiments()]
    runs = client.search_runs(experiments, filter_string=f"tags.`{STAGE_TAG}` = '{stage}'",
                              order_by=["attributes.start_time DESC"], max_results=1)
    if not runs:
        raise LookupError(f"no '{stage}' stage run in {run_dir / 'mlflow.db'}")
    return runs[0]


FORK_TAG = "evr1.in.forked_from"  # the checkpoint a fork (`trainer.init_from`) started from


def _fork_origin(run) -> str | None:
    """The checkpoint a train run was forked from, or None: a run that is no fork logs its
    `trainer.init_from` param as "null" (the config's None)."""
    origin = run.data.tags.get(FORK_TAG) or run.data.params.get("trainer.init_from")
    return None if origin in (None, "", "null", "None") else origin


def lineage(run_dir: Path) -> list[tuple[Path, object, int | None]]:
    """(run folder, train run, last step it contributes) from the oldest origin to the newest train run
    of `run_dir`: a fork's steps up to its checkpoint are its origin's, found through the checkpoint
    folder's `mlflow_train_run.json` (the train run that wrote it; the origin folder may hold other
    forks' train runs since)."""
    chain: list[tuple[Path, object, int | None]] = [(run_dir, stage_run(run_dir, "train"), None)]
    # The tag is set when the train stage ends; a fork killed before that has only its config's param.
    while origin := _fork_origin(chain[0][1]):
        ckpt = Path(origin)
        if not (ckpt / "trainer_state.json").exists():  # a run's checkpoint folder: its newest at the time
            from evr1.train.checkpoint import resolve

            ckpt = resolve(ckpt)
        folder = ckpt.parents[2]  # <run folder>/checkpoints/<fingerprint>/step_N
        written_by = json.loads((ckpt.parent / "mlflow_train_run.json").read_text())
        run_id = next(iter(written_by.values()))
        step = json.loads((ckpt / "trainer_state.json").read_text())["step"]
        chain.insert(0, (folder, _client(folder).get_run(run_id), step))
    return chain


def curve(run_dir: Path, key: str) -> list[tuple[int, float, float]]:
    """(step, value, seconds of training) of one metric of the newest train run, a fork's origins'
    steps first. Seconds run on across a fork: each origin's time to its fork point is added."""
    points: list[tuple[int, float, float]] = []
    offset = 0.0
    for folder, run, upto in lineage(run_dir):
        start = run.info.start_time
        history = sorted((m.step, m.value, (m.timestamp - start) / 1000)
                         for m in _client(folder).get_metric_history(run.info.run_id, key))
        done = points[-1][0] if points else -1
        points.extend((s, v, t + offset) for s, v, t in history if s > done and (upto is None or s <= upto))
        offset = points[-1][2] if points else offset
    return points


def validation(run_dir: Path) -> dict[str, list[tuple[int, float, float]]]:
    """Every `val/accuracy*` curve of the train run (overall and per family)."""
    return curves_of(run_dir, "val/accuracy")


def curves_of(run_dir: Path, prefix: str) -> dict[str, list[tuple[int, float, float]]]:
    """Every curve of the train run whose key starts with `prefix` (the key itself and `prefix/<family>`)."""
    run = stage_run(run_dir, "train")
    keys = sorted(k for k in run.data.metrics if k == prefix or k.startswith(prefix + "/"))
    return {k: curve(run_dir, k) for k in keys}


# The learning-signal diagnostics (evr1/train/diagnostics.py) drawn per family beside the accuracy, when logged.
# Groups whose rewards all agree: logged since w_reinforce (whose groups of equal rewards still carry an
# advantage, so its zero-advantage share is near 0 by construction); older runs drew the zero-advantage
# share, which equals it under a group baseline, and still do.
DIAGNOSTICS = {"diag/same_reward_groups": "groups whose rewards are all equal, per family",
               "diag/zero_adv_groups": "groups with zero advantage, per family",
               "diag/answer_entropy": "answer-token entropy, per family"}
SHARES = ("diag/same_reward_groups", "diag/zero_adv_groups")


def first_reaching(points: list[tuple[int, float, float]], target: float) -> tuple[int, float] | None:
    """(step, seconds) of the first validation at or above `target`, or None."""
    for step, value, seconds in points:
        if value >= target:
            return step, seconds
    return None


def train_wall_s(run_dir: Path) -> float:
    """The train stage's start to its end. A resumed run keeps its MLflow run, so this spans the time
    between sessions too: `rl_steps_s` is the figure that does not."""
    info = stage_run(run_dir, "train").info
    return (info.end_time - info.start_time) / 1000 if info.end_time else float("nan")


def rl_steps_s(run_dir: Path, upto: int | None = None) -> float:
    """The RL steps' own time (`time/step_s` summed, to step `upto` when given): no warm-up, validation,
    start-up, nor any gap between a run and its resume; a fork's steps before its fork point are its
    origin's."""
    latest: dict[int, float] = {}
    for folder, run, until in lineage(run_dir):
        history = _client(folder).get_metric_history(run.info.run_id, "time/step_s")
        mine = {m.step: m.value for m in sorted(history, key=lambda m: m.timestamp)}  # a retried step: its last
        latest.update({s: v for s, v in mine.items() if until is None or s <= until})
    return float(sum(v for step, v in latest.items() if upto is None or step <= upto))


def summary(run_dir: Path, target: float = 0.8) -> dict:
    """The figures one run contributes to research.learning.run's line."""
    curves = validation(run_dir)
    overall = curves["val/accuracy"]
    reached = first_reaching(overall, target)
    last_step = overall[-1][0]
    return {
        "heldout_accuracy_before_rl": overall[0][1] if overall[0][0] == 0 else None,
        "heldout_accuracy_before_rl_by_family": {k.rsplit("/", 1)[1]: v[0][1] for k, v in curves.items()
                                                 if k != "val/accuracy" and v[0][0] == 0},
        "val_accuracy_final": overall[-1][1],
        "val_accuracy_final_by_family": {k.rsplit("/", 1)[1]: v[-1][1] for k, v in curves.items()
                                         if k != "val/accuracy" and v[-1][0] == last_step},
        "steps": last_step,
        "steps_to_target": reached[0] if reached else None,
        "seconds_to_target": round(reached[1], 1) if reached else None,
        "train_wall_s": round(train_wall_s(run_dir), 1),
        "rl_steps_s": round(rl_steps_s(run_dir), 1),
    }


def at_steps(run_dir: Path, steps: tuple[int, ...]) -> dict[str, dict[int, float]]:
    """Held-out accuracy (overall and per family) at the given validation steps, where logged."""
    out: dict[str, dict[int, float]] = {}
    for key, points in validation(run_dir).items():
        name = "all" if key == "val/accuracy" else key.rsplit("/", 1)[1]
        out[name] = {step: value for step, value, _ in points if step in steps}
    return out


def test_rows(run_dir: Path) -> list[dict]:
    """The run's test split as ingested (`data.test_files`, `data.synth.test`)."""
    from evr1.data.ingest import read_samples

    return read_samples(str(run_dir / "lance" / "samples"), split="test")


def test_scores(run_dir: Path) -> dict:
    """The `test` benchmark's scores of the run's merged model (the eval stage, once at the end):
    overall and per family (`evr1.train.breakdown.family`: the synthetic kind, else the problem type)."""
    from evr1.train.breakdown import family

    tags = stage_run(run_dir, "eval-test").data.tags
    results = Path(tags["evr1.out.results"]) / "results.jsonl"
    latest = {}
    for line in results.read_text().splitlines():
        record = json.loads(line)
        latest[str(record["id"])] = float(record.get("score", 0.0))
    per: dict[str, list[float]] = {}
    for row in test_rows(run_dir):
        per.setdefault(family(row), []).append(latest.get(str(row["sample_id"]), 0.0))  # unscored counts as wrong
    scores = [v for values in per.values() for v in values]
    return {"accuracy": sum(scores) / max(len(scores), 1), "items": len(scores),
            "by_family": {k: sum(v) / len(v) for k, v in sorted(per.items())},
            "items_by_family": {k: len(v) for k, v in sorted(per.items())}}


def answer_floors(rows: list[dict]) -> dict[str, dict[str, float]]:
    """Per family, what answering without looking scores on these rows, by the training reward's
    accuracy: `chance` (an answer drawn uniformly from each item's answer space, in expectation) and
    `constant` (the best single answer given to every item: the floor a collapsed policy sits at)."""
    from evr1 import rewards
    from evr1.data.ingest import reward_sample
    from evr1.train.breakdown import family
    from evr1.train.warmup import answer_space

    chance: dict[str, list[float]] = {}
    constant: dict[str, dict[str, list[float]]] = {}
    for row in rows:
        item, name = reward_sample(dict(row)), family(row)
        scores = {a: float(rewards.compute_score(f"<answer>{a}</answer>", item)["accuracy"]) for a in answer_space(row)}
        chance.setdefault(name, []).append(sum(scores.values()) / len(scores))
        for answer, value in scores.items():
            constant.setdefault(name, {}).setdefault(answer, []).append(value)
    return {name: {"chance": sum(v) / len(v),
                   "constant": max(sum(x) / len(x) for x in constant[name].values() if len(x) == len(v))}
            for name, v in sorted(chance.items())}


SMOOTH = 25  # steps: a per-step share over 8 groups a family moves by 1/8; the trend is what the panel shows


def _trailing_mean(values, window: int) -> np.ndarray:
    """Each point's mean with the `window - 1` before it (fewer at the start)."""
    sums = np.cumsum(np.asarray(values, dtype=float))
    counts = np.minimum(np.arange(1, len(sums) + 1), window)
    before = np.concatenate([np.zeros(window), sums])[:len(sums)]
    return (sums - before) / counts


def plot(runs: dict[str, Path], out: Path, target: float = 0.8) -> Path:
    """Held-out accuracy (overall, solid; per family, thin) against step, one colour per run; then, for
    the runs that logged them, the learning-signal diagnostics per family (`DIAGNOSTICS`)."""
    diags = {key: {label: curves_of(d, key) for label, d in runs.items()} for key in DIAGNOSTICS}
    diags = {key: per_run for key, per_run in diags.items() if any(per_run.values())}
    if "diag/same_reward_groups" in diags:  # the zero-advantage panel would only repeat it (or read ~0)
        diags.pop("diag/zero_adv_groups", None)
    plt, fig, axes = plots.grid(2 + len(diags), per_row=2, width=5.5, height=4.0)
    for (label, run_dir), colour in zip(runs.items(), ("#4c72b0", "#dd8452", "#55a868", "#c44e52")):
        curves = validation(run_dir)
        steps, values, _ = zip(*curves["val/accuracy"])
        axes[0].plot(steps, values, color=colour, marker="o", markersize=3, label=label)
        for key, styled in zip((k for k in curves if k != "val/accuracy"), ("-", "--", ":", "-.", (0, (1, 3)))):
            s, v, _ = zip(*curves[key])
            axes[1].plot(s, v, color=colour, linestyle=styled, linewidth=1.2,
                         label=f"{label}: {key.rsplit('/', 1)[1]}")
    for ax, title in zip(axes, ("held-out accuracy (all families)", "held-out accuracy per family")):
        ax.axhline(target, color="grey", linewidth=0.8, linestyle="--")
        ax.set_ylim(0, 1.02)
        ax.set_xlabel("RL step (0: after the format warm-up)")
        ax.set_title(title)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    for ax, (key, per_run) in zip(axes[2:], diags.items()):
        for (label, curves), colour in zip(per_run.items(), ("#4c72b0", "#dd8452", "#55a868", "#c44e52")):
            for name, styled in zip((k for k in curves if k != key), ("-", "--", ":", "-.", (0, (1, 3)))):
                s, v, _ = zip(*curves[name])
                ax.plot(s, _trailing_mean(v, SMOOTH), color=colour, linestyle=styled, linewidth=1.2,
                        label=f"{label}: {name.rsplit('/', 1)[1]}")
        if key in SHARES:  # a share of groups
            ax.set_ylim(0, 1.02)
        ax.set_xlabel("RL step")
        ax.set_title(f"{DIAGNOSTICS[key]} ({SMOOTH}-step mean)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    return plots.save(plt, fig, out, dpi=90)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", nargs="+", type=Path, help="run folders (label = folder name)")
    parser.add_argument("--out", type=Path, default=Path("docs/learning.png"))
    parser.add_argument("--target", type=float, default=0.8)
    args = parser.parse_args()
    runs = {d.name: d for d in args.runs}
    for label, run_dir in runs.items():
        print(json.dumps({"run": label, **summary(run_dir, args.target)}))
    print(plot(runs, args.out, args.target))


if __name__ == "__main__":
    main()
