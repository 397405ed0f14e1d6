"""PNG plots of a run, from the metrics it logged: training curves and per-benchmark score bars.

matplotlib with the non-interactive Agg backend (no display needed); each function writes one PNG
and returns its path, so the pipeline can log it as an MLflow artifact.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

# Panel title → the metric keys drawn in it (a key absent from the history is left out; a panel
# with no key present is dropped). Accuracy also takes every per-family `reward/accuracy/<family>`.
PANELS: dict[str, tuple[str, ...]] = {
    "reward": ("reward/overall", "reward/format"),
    "accuracy": ("reward/accuracy",),
    "KL": ("actor/kl_loss", "actor/kl"),
    "entropy": ("actor/entropy",),
    "response length": ("response/length_mean", "response_length/mean", "response/length"),
}


def figure(n: int, width: float = 4.0, height: float = 3.0):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, n, figsize=(width * n, height), squeeze=False)
    return plt, fig, list(axes[0])


def save(plt, fig, out: Path, dpi: int = 80) -> Path:
    """Lay out, write the PNG (its folder made) and close the figure."""
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=dpi)
    plt.close(fig)
    return out


def _keys(history: Sequence[Mapping], title: str) -> list[str]:
    present = {k for row in history for k in row}
    keys = [k for k in PANELS[title] if k in present]
    if title == "accuracy":
        keys += sorted(k for k in present if k.startswith("reward/accuracy/"))
    if title == "response length" and not keys:
        keys = sorted(k for k in present if "length" in k and k.endswith("mean"))[:2]
    return keys


def training_curves(history: Sequence[Mapping], out: Path) -> Path | None:
    """Reward, accuracy (per family), KL, entropy and response length against step; None when the
    history holds none of them."""
    panels = [(title, keys) for title in PANELS if (keys := _keys(history, title))]
    if not panels:
        return None
    plt, fig, axes = figure(len(panels))
    for ax, (title, keys) in zip(axes, panels):
        for key in keys:
            pts = [(row["step"], row[key]) for row in history if key in row and "step" in row]
            if pts:
                ax.plot(*zip(*pts), marker="o", markersize=3, label=key)
        ax.set_title(title)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    return save(plt, fig, out)


def benchmark_bars(scores: Mapping[str, float], out: Path) -> Path:
    """One bar per benchmark with its headline score (in %), labelled."""
    plt, fig, (ax,) = figure(1, width=max(4.0, 0.8 * len(scores) + 2), height=3.5)
    names = list(scores)
    values = [100 * float(scores[n]) for n in names]
    bars = ax.bar(names, values, color="#4c72b0")
    ax.bar_label(bars, fmt="%.1f", fontsize=8)
    ax.set_ylabel("score (%)")
    ax.set_ylim(0, 105)
    ax.set_title("benchmark scores")
    ax.tick_params(axis="x", rotation=45, labelsize=8)
    return save(plt, fig, out)
