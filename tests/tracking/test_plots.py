"""Run plots are real PNG files: training curves from a metric history, benchmark scores as bars."""

from PIL import Image

from evr1.tracking.plots import benchmark_bars, training_curves


def test_training_curves_and_benchmark_bars_are_valid_pngs(tmp_path):
    history = [{"step": s, "reward/overall": 0.1 * s, "reward/accuracy": 0.05 * s, "reward/accuracy/math": 0.2,
                "actor/kl_loss": 0.01 * s, "actor/entropy": 5 - s, "response/length_mean": 10.0 + s} for s in (1, 2, 3)]
    curves = training_curves(history, tmp_path / "curves.png")
    bars = benchmark_bars({"heldout": 0.5, "mvbench": 0.25}, tmp_path / "bars.png")
    for path in (curves, bars):
        with Image.open(path) as img:
            img.verify()
            assert img.format == "PNG" and img.size[0] > 200
    with Image.open(curves) as img:
        assert img.size[0] > 4 * img.size[1]  # five panels side by side


def test_no_curves_without_any_plotted_metric(tmp_path):
    assert training_curves([{"step": 1, "time/step_s": 1.0}], tmp_path / "none.png") is None
