"""The Theorem 5.1 check's part of a sweep report: for a sweep of the task `causal_regression`
(sweep.paper: random_attention), the test fit_error of every grid point and variant, and a
figure of it against the number of heads, one line per setting of the other grid keys (the
MLP width), beside the floor of the position and the current token alone."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ...figures import plt, save_figure
from ...stats import summarize

HEADING = "## Theorem 5.1: test fit_error per grid point"
HEADS = "model.n_heads"
FIGURE = "fit_error.png"


def _runs(groups: dict[tuple[str, str], list[dict]]) -> list[dict[str, Any]]:
    return [r for runs in groups.values() for r in runs]


def _cell(values: list[float]) -> str:
    return summarize(values).format(3, (0.0, float("inf")))


def fit_error_section(sweep_dir: Path, variants: list[str], groups, chosen) -> list[str]:
    """Markdown lines (and fit_error.png in `sweep_dir`); [] for a sweep of another task."""
    runs = _runs(groups)
    if not runs or any(r["summary"].get("task") != "causal_regression" for r in runs):
        return []
    listed = list(dict.fromkeys([*variants, *(v for v, _ in groups)]))
    keys = list(dict.fromkeys(k for r in runs for k in r["point"]))
    others = [k for k in keys if k != HEADS]
    # (other keys' values) -> heads -> variant -> test fit_errors over seeds
    table: dict[tuple, dict[Any, dict[str, list[float]]]] = {}
    for r in runs:
        line = tuple(r["point"].get(k) for k in others)
        heads = r["point"].get(HEADS)
        table.setdefault(line, {}).setdefault(heads, {}).setdefault(r["variant"], []).append(
            r["summary"]["test"]["fit_error"])
    floors = [r["summary"]["test"]["current_token_floor"] for r in runs]
    floor = sum(floors) / len(floors)
    lines = [HEADING, "",
             "Test fit_error (squared error over the targets' variance: 1 is predicting each output's mean, 0 an "
             "exact fit), mean ± std [95% t interval] over seeds, at every grid point. Floor of position and "
             f"current token alone (`current_token_floor`, on the test set): {floor:.3f}.", "",
             "| " + " | ".join([*others, HEADS, *listed]) + " |", "|---" * (len(others) + 1 + len(listed)) + "|"]
    for line in sorted(table, key=lambda t: [(v is None, v) for v in t]):
        for heads in sorted(table[line], key=lambda h: (h is None, h)):
            cells = [_cell(table[line][heads][v]) if v in table[line][heads] else "-" for v in listed]
            lines.append("| " + " | ".join([*map(str, line), str(heads), *cells]) + " |")
    _plot(sweep_dir / FIGURE, table, others, listed, floor)
    return lines + ["", f"![{FIGURE}]({FIGURE})", "",
                    f"{FIGURE}: test fit_error against heads, one line per {', '.join(others) or 'setting'}, one "
                    "panel per variant (error bars: 95% t interval over seeds; dashed: the current-token floor).", ""]


def _plot(path: Path, table, others: list[str], variants: list[str], floor: float) -> None:
    from matplotlib.ticker import ScalarFormatter  # here: papers are imported with modformer, matplotlib is slow

    fig, axes = plt.subplots(1, len(variants), figsize=(5.5 * len(variants), 4), sharey=True, squeeze=False)
    for ax, variant in zip(axes[0], variants):
        for line in sorted(table, key=lambda t: [(v is None, v) for v in t]):
            heads = sorted(h for h in table[line] if variant in table[line][h])
            stats = [summarize(table[line][h][variant]) for h in heads]
            below = [0.0 if s.n < 2 else s.mean - max(s.interval()[0], 0.0) for s in stats]
            above = [0.0 if s.n < 2 else s.interval()[1] - s.mean for s in stats]
            label = ", ".join(f"{k.rsplit('.', 1)[-1]}={v}" for k, v in zip(others, line)) or variant
            ax.errorbar(heads, [s.mean for s in stats], yerr=[below, above], marker="o", capsize=3, label=label)
        ax.axhline(floor, color="grey", linestyle="--", linewidth=1, label="current-token floor")
        ax.set(xscale="log", xlabel="heads (model.n_heads)", title=variant, ylim=(0, None))
        ax.set_xticks(sorted({h for line in table.values() for h in line}))
        ax.get_xaxis().set_major_formatter(ScalarFormatter())
        ax.get_xaxis().set_minor_formatter(plt.NullFormatter())
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    axes[0][0].set_ylabel("test fit_error")
    fig.tight_layout()
    save_figure(fig, path)

