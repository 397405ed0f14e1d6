"""PNG plots of a run, from the metrics it logged: training curves and per-benchmark score bars.

The training curves put what a reader looks for first: reward, then accuracy on the training
rollouts and on the held-out validation set, with the validation accuracy before RL (step 0) and the
accuracy of guessing as horizontal lines, so a curve is read against where it started and against
chance; KL, entropy (over all tokens and at the answer's), response length; the learning signal
(`diag/*`, evr1/train/diagnostics.py: groups with no advantage or a format-only one, the advantage of
each group's most frequent answer); the warm-up's supervised loss when there was one.

matplotlib with the non-interactive Agg backend (no display needed); each function writes one PNG
and returns its path, so the pipeline can log it as an MLflow artifact.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

# Panel title → the metric keys drawn in it (a key absent from the history is left out; a panel
# with no key present is dropped). The headline accuracy panels carry the baseline and chance lines;
# the per-family lines (`<key>/<family>`) have panels of their own, after the headline ones.
PANELS: dict[str, tuple[str, ...]] = {
    "reward": ("reward/overall", "reward/format"),
    "training accuracy": ("reward/accuracy",),
    "validation accuracy": ("val/accuracy",),
    "KL": ("actor/kl_loss", "actor/kl"),
    "entropy": ("actor/entropy", "diag/answer_entropy"),
    "response length": ("response/length_mean", "response_length/mean", "response/length"),
    "groups without an answer signal": ("diag/zero_adv_groups", "diag/same_reward_groups", "diag/format_only_groups"),
    "advantage of the most frequent answer": ("diag/modal_answer_adv",),
}
ACCURACY = ("training accuracy", "validation accuracy")
SHARES = ("groups without an answer signal",)  # shares of groups: drawn on [0, 1]
# Panel of one metric per task family → the prefix of its keys (drawn when there are two families or more).
FAMILY_PANELS = {"training accuracy by task family": "reward/accuracy/",
                 "validation accuracy by task family": "val/accuracy/",
                 "answer entropy by task family": "diag/answer_entropy/",
                 "zero-advantage groups by task family": "diag/zero_adv_groups/",
                 "same-reward groups by task family": "diag/same_reward_groups/",
                 "format-only groups by task family": "diag/format_only_groups/",
                 "most frequent answer's advantage by task family": "diag/modal_answer_adv/"}
# A family panel's y label, and whether it is a share drawn on [0, 1].
FAMILY_AXES = {"answer entropy by task family": ("entropy (nats)", False),
               "zero-advantage groups by task family": ("share of groups", True),
               "same-reward groups by task family": ("share of groups", True),
               "format-only groups by task family": ("share of groups", True),
               "most frequent answer's advantage by task family": ("advantage", False)}
WARMUP_KEY = "warmup/nll"  # the warm-up's supervised loss (evr1/train/workers/policy.py `sft_step`)
PANELS_PER_ROW = 4
# What a legend says instead of the metric's key.
LABELS = {"reward/overall": "reward", "reward/format": "format reward", "reward/accuracy": "all samples",
          "val/accuracy": "held-out, greedy", "actor/kl_loss": "KL loss", "actor/kl": "KL",
          "actor/entropy": "all tokens", "diag/answer_entropy": "answer tokens",
          "response/length_mean": "mean (tokens)", "response_length/mean": "mean (tokens)",
          "response/length": "mean (tokens)", WARMUP_KEY: "SFT loss (NLL per token)",
          "diag/zero_adv_groups": "zero advantage", "diag/same_reward_groups": "equal rewards",
          "diag/format_only_groups": "format-only advantage",
          "diag/modal_answer_adv": "mean over groups"}


def figure(n: int, width: float = 4.0, height: float = 3.0):
    """One row of `n` panels: (pyplot, figure, axes)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, n, figsize=(width * n, height), squeeze=False)
    return plt, fig, list(axes[0])


def grid(n: int, per_row: int = PANELS_PER_ROW, width: float = 4.2, height: float = 3.2):
    """`n` panels in rows of `per_row` (unused cells hidden): (pyplot, figure, the n axes)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cols, rows = min(n, per_row), -(-n // per_row)
    fig, axes = plt.subplots(rows, cols, figsize=(width * cols, height * rows), squeeze=False)
    flat = [ax for row in axes for ax in row]
    for ax in flat[n:]:
        ax.set_visible(False)
    return plt, fig, flat[:n]


def save(plt, fig, out: Path, dpi: int = 80) -> Path:
    """Lay out, write the PNG (its folder made) and close the figure."""
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=dpi)
    plt.close(fig)
    return out


def label(key: str) -> str:
    """A legend's words for a metric key: `reward/accuracy/multiple_choice` → `multiple choice`."""
    if key in LABELS:
        return LABELS[key]
    for prefix in FAMILY_PANELS.values():  # a family's line: its name
        if key.startswith(prefix):
            return key[len(prefix):].replace("_", " ")
    return key


def chance_accuracy(samples: Sequence[Mapping]) -> float | None:
    """The accuracy of answering each multiple-choice question with a random option (1 / its options)
    and nothing else right, averaged over `samples`; None when none has options (chance unknown)."""
    if not samples:
        return None
    guesses = [1.0 / len(s["options"]) for s in samples if s.get("options")]
    return sum(guesses) / len(samples) if guesses else None


def _keys(history: Sequence[Mapping], title: str) -> list[str]:
    present = {k for row in history for k in row}
    if title in FAMILY_PANELS:
        families = sorted(k for k in present if k.startswith(FAMILY_PANELS[title]))
        return families if len(families) > 1 else []  # one family is the whole: its line would repeat it
    keys = [k for k in PANELS[title] if k in present]
    if title == "response length" and not keys:
        keys = sorted(k for k in present if "length" in k and k.endswith("mean"))[:2]
    return keys


def curves_figure(history: Sequence[Mapping], *, before_rl: Mapping[str, float] | None = None,
                  warmup: Sequence[Mapping] | None = None, chance: float | None = None):
    """The figure of `training_curves`, not yet saved: (pyplot, figure), or None when there is nothing
    to draw. `before_rl`: the validation metrics at step 0 (where RL starts, after any warm-up); a
    history row at step 0 serves too. `warmup`: the warm-up's rows (`step`, `warmup/nll`). `chance`:
    the accuracy of guessing (`chance_accuracy`), a line on the accuracy panels."""
    rows = list(history)
    baseline = dict(before_rl or {})
    for row in rows:
        if row.get("step") == 0:
            baseline = {**{k: v for k, v in row.items() if k.startswith("val/")}, **baseline}
    if baseline and not any(r.get("step") == 0 for r in rows):
        rows = [{"step": 0, **baseline}, *rows]
    panels = [(title, keys) for title in PANELS if (keys := _keys(rows, title))]
    warm = [(r["step"], r[WARMUP_KEY]) for r in warmup or () if WARMUP_KEY in r and "step" in r]
    if warm:
        panels.append(("warm-up (supervised)", [WARMUP_KEY]))
    panels += [(title, keys) for title in FAMILY_PANELS if (keys := _keys(rows, title))]
    if not panels:
        return None
    from matplotlib.ticker import MaxNLocator

    plt, fig, axes = grid(len(panels))
    # one colour per task family, the same in the training and the validation panel
    names = sorted({label(k) for title, keys in panels if title in FAMILY_PANELS for k in keys})
    palette = plt.get_cmap("tab10").colors
    colours = {n: palette[(i + 1) % len(palette)] for i, n in enumerate(names)}  # tab10's first: the headlines
    for ax, (title, keys) in zip(axes, panels):
        family = title in FAMILY_PANELS
        for key in keys:
            pts = warm if key == WARMUP_KEY else [(r["step"], r[key]) for r in rows if key in r and "step" in r]
            if pts:
                ax.plot(*zip(*pts), marker="o" if len(pts) <= 40 else None, markersize=3, label=label(key),
                        linewidth=1.2 if family else 2.0, **({"color": colours[label(key)]} if family else {}))
        if title == "validation accuracy" and "val/accuracy" in baseline:
            ax.axhline(baseline["val/accuracy"], color="grey", linestyle="--", linewidth=1.2,
                       label=f"before RL: {baseline['val/accuracy']:.2f}")
        if title in ACCURACY and chance is not None:
            ax.axhline(chance, color="firebrick", linestyle=":", linewidth=1.2, label=f"chance: {chance:.2f}")
        ylabel, bounded = FAMILY_AXES.get(title, ("accuracy", True))
        if title in ACCURACY or (family and bounded):
            ax.set_ylim(-0.02, 1.02)
        if title in ACCURACY or family:
            ax.set_ylabel(ylabel)
        if title in SHARES:
            ax.set_ylim(-0.02, 1.02)
            ax.set_ylabel("share of groups")
        if title == "advantage of the most frequent answer":
            ax.axhline(0.0, color="grey", linewidth=0.8)
        ax.set_title(title)
        ax.set_xlabel("warm-up step" if keys == [WARMUP_KEY] else "step")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # steps are whole
        ax.grid(alpha=0.3)
        if family:  # several lines: the legend below the panel, off the curves
            ax.legend(fontsize=7, frameon=False, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=2)
        else:
            ax.legend(fontsize=8, frameon=False, loc="best")
    return plt, fig


def training_curves(history: Sequence[Mapping], out: Path, *, before_rl: Mapping[str, float] | None = None,
                    warmup: Sequence[Mapping] | None = None, chance: float | None = None) -> Path | None:
    """Reward, training and validation accuracy (per family; the before-RL baseline and chance as
    lines), KL, entropy, response length against step, and the warm-up's loss, as one PNG; None when
    the history holds none of them."""
    made = curves_figure(history, before_rl=before_rl, warmup=warmup, chance=chance)
    if made is None:
        return None
    return save(*made, out)


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
