"""Run plots are real PNG files a person can read: training curves from a metric history (with the
validation accuracy against its before-RL baseline and chance, and the warm-up's loss), benchmark
scores as bars. The figures are inspected through matplotlib's own artists."""

from PIL import Image

from evr1.tracking.plots import benchmark_bars, chance_accuracy, curves_figure, training_curves


def _history():
    rows = [{"step": s, "reward/overall": 0.1 * s, "reward/format": 0.9, "reward/accuracy": 0.05 * s,
             "reward/accuracy/multiple_choice": 0.2, "reward/accuracy/numerical": 0.1,
             "actor/kl_loss": 0.01 * s, "actor/entropy": 5 - s, "response/length_mean": 10.0 + s} for s in (1, 2, 3, 4)]
    rows[1].update({"val/accuracy": 0.5, "val/overall": 0.6})  # validated every 2 steps
    rows[3].update({"val/accuracy": 0.625, "val/overall": 0.7})
    return rows


def _panels(fig) -> dict:
    return {ax.get_title(): ax for ax in fig.axes if ax.get_visible()}


def _labels(ax) -> list[str]:
    return [line.get_label() for line in ax.get_lines()]


def test_training_curves_and_benchmark_bars_are_valid_pngs(tmp_path):
    curves = training_curves(_history(), tmp_path / "curves.png", before_rl={"val/accuracy": 0.25},
                             warmup=[{"step": 1, "warmup/nll": 2.0}, {"step": 2, "warmup/nll": 1.5}], chance=0.25)
    bars = benchmark_bars({"heldout": 0.5, "mvbench": 0.25}, tmp_path / "bars.png")
    for path in (curves, bars):
        with Image.open(path) as img:
            img.verify()
            assert img.format == "PNG" and img.size[0] > 200
    with Image.open(curves) as img:
        assert img.size[0] > img.size[1]  # two rows of four panels (eight: the family panel last)


def test_validation_accuracy_has_its_baseline_and_chance_lines():
    plt, fig = curves_figure(_history(), before_rl={"val/accuracy": 0.25, "val/overall": 0.3},
                             warmup=[{"step": 1, "warmup/nll": 2.0, "warmup/grad_norm": 1.0},
                                     {"step": 2, "warmup/nll": 1.5, "warmup/grad_norm": 0.8}],
                             chance=0.2)
    try:
        panels = _panels(fig)
        assert list(panels) == ["reward", "training accuracy", "validation accuracy", "KL", "entropy",
                                "response length", "warm-up (supervised)", "training accuracy by task family"]
        val = panels["validation accuracy"]
        curve = next(line for line in val.get_lines() if line.get_label() == "held-out, greedy")
        # the curve starts at the before-RL value (step 0), then the validated steps
        assert list(curve.get_xdata()) == [0, 2, 4] and list(curve.get_ydata()) == [0.25, 0.5, 0.625]
        flat = {line.get_label(): set(line.get_ydata()) for line in val.get_lines() if line is not curve}
        assert flat == {"before RL: 0.25": {0.25}, "chance: 0.20": {0.2}}
        assert val.get_ylabel() == "accuracy" and val.get_xlabel() == "step"
        # legends say what a reader needs, not metric keys
        legend = [t.get_text() for t in val.get_legend().get_texts()]
        assert legend == ["held-out, greedy", "before RL: 0.25", "chance: 0.20"]
        assert _labels(panels["training accuracy"]) == ["all samples", "chance: 0.20"]
        assert _labels(panels["training accuracy by task family"]) == ["multiple choice", "numerical"]
        legend = [t.get_text() for t in panels["training accuracy by task family"].get_legend().get_texts()]
        assert legend == ["multiple choice", "numerical"]
        assert _labels(panels["reward"]) == ["reward", "format reward"]
        warm = panels["warm-up (supervised)"]
        assert _labels(warm) == ["SFT loss (NLL per token)"] and warm.get_xlabel() == "warm-up step"
        assert list(warm.get_lines()[0].get_ydata()) == [2.0, 1.5]
    finally:
        plt.close(fig)


def test_baseline_from_a_step_zero_row_and_no_lines_without_data():
    rows = [{"step": 0, "val/accuracy": 0.4}, {"step": 1, "reward/overall": 0.5, "val/accuracy": 0.45}]
    plt, fig = curves_figure(rows)
    try:
        panels = _panels(fig)
        assert _labels(panels["validation accuracy"]) == ["held-out, greedy", "before RL: 0.40"]
        assert "warm-up (supervised)" not in panels and "chance" not in " ".join(_labels(panels["validation accuracy"]))
    finally:
        plt.close(fig)
    plt, fig = curves_figure([{"step": 1, "reward/overall": 0.5}])  # no validation logged: no panel for it
    try:
        assert list(_panels(fig)) == ["reward"]
    finally:
        plt.close(fig)


def test_a_task_family_keeps_its_colour_in_the_training_and_the_validation_panel():
    rows = [{"step": s, "reward/accuracy/a": 0.1, "reward/accuracy/b": 0.2, "reward/accuracy/c": 0.3,
             "val/accuracy/b": 0.4, "val/accuracy/c": 0.5} for s in (1, 2)]
    plt, fig = curves_figure(rows)
    try:
        panels = _panels(fig)
        train = {ln.get_label(): ln.get_color() for ln in panels["training accuracy by task family"].get_lines()}
        val = {ln.get_label(): ln.get_color() for ln in panels["validation accuracy by task family"].get_lines()}
        assert set(val) == {"b", "c"} and all(val[k] == train[k] for k in val) and len(set(train.values())) == 3
    finally:
        plt.close(fig)


def test_chance_is_a_random_option_of_each_multiple_choice_question():
    assert chance_accuracy([{"options": ["A", "B", "C", "D"]}, {"options": ["A", "B"]}]) == (0.25 + 0.5) / 2
    # an open question is not guessed right by chance: it counts 0
    assert chance_accuracy([{"options": ["A", "B"]}, {"options": []}]) == 0.25
    assert chance_accuracy([{"options": None}, {"problem": "x"}]) is None and chance_accuracy([]) is None


def test_no_curves_without_any_plotted_metric(tmp_path):
    assert training_curves([{"step": 1, "time/step_s": 1.0}], tmp_path / "none.png") is None


def test_the_before_rl_baseline_of_a_continued_training_is_read_back_from_mlflow(tmp_path):
    """A continued training has no before-RL result of its own: the plot takes the step-0 values its
    run holds (real MLflow, SQLite)."""
    from evr1.tracking import Tracker, default_tracking_uri

    tr = Tracker(default_tracking_uri(tmp_path), "evr1", artifact_root=tmp_path / "mlartifacts")
    tr.start_parent("plots")
    with tr.stage("train"):
        tr.log_metrics({"val/accuracy": 0.25, "val/overall": 0.3}, step=0)
        tr.log_metrics({"val/accuracy": 0.5, "reward/overall": 0.4}, step=2)
        assert tr.logged_at_step(0, "val/") == {"val/accuracy": 0.25, "val/overall": 0.3}
        assert tr.logged_at_step(2) == {"val/accuracy": 0.5, "reward/overall": 0.4}
    assert tr.logged_at_step(0) == {}  # no stage run open
