"""A test metric (the sweep's: accuracy, or loss for language modelling) against budget or
width, for sweeps whose grid varies `train.steps`, `train.batch_size` or `model.d_model`:
each grid point is a full run with its own schedule, so a point is what that budget buys,
not a snapshot of a longer run."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Sequence

from ..train.budget import trained
from ..figures import plt, save_figure
from .runner import run_config
from .sections import mark as paper_mark
from ..stats import metric_bounds, summarize

BUDGET_KEYS = ("train.steps", "train.batch_size")
WIDTH_KEY = "model.d_model"


def run_budget(config: dict[str, Any] | None, summary: dict[str, Any]) -> dict[str, Any] | None:
    """A run's budget from its config (a pure function of it: its units may be newer than the
    run), else as its summary recorded it."""
    return trained(config) if config is not None else summary.get("budget")


def plot_budget(sweep_dir: Path, path: Path, grid: dict[str, list], variants: list[str],
                groups: dict[tuple[str, str], list[dict]], metric: str = "accuracy",
                papers: Sequence[str] = ()) -> str | None:
    """Draw the test `metric` (mean over seeds, 95% interval) against what the runs trained on
    (sequences, or tokens for language modelling: `train.budget.trained`), or against width,
    one line per variant and per value of the other grid keys; where the sweep is one of
    `papers`' experiments, the line that paper marks (its budget or width). Returns the
    figure's caption, or None when the grid varies neither."""
    by_budget = any(k in grid for k in BUDGET_KEYS)
    if not by_budget and WIDTH_KEY not in grid:
        return None
    field = "amount" if by_budget else "width"
    others = [k for k in grid if k not in BUDGET_KEYS and (by_budget or k != WIDTH_KEY)]
    lines: dict[str, dict[float, list[float]]] = {}
    unit, mark = "sequences", None
    for (variant, _), runs in groups.items():
        if variant not in variants:
            continue
        for run in runs:
            config = run_config(sweep_dir, run)
            b = run_budget(config, run["summary"])
            if b is None or metric not in run["summary"]["test"]:
                continue
            unit = b.get("unit", "sequences") if by_budget else unit
            mark = mark or paper_mark(papers, config, field)
            label = ", ".join([variant, *(f"{k}={run['point'][k]}" for k in others if k in run["point"])])
            x = b.get(field, b["sequences"])  # a summary from before budgets had units: sequences
            lines.setdefault(label, {}).setdefault(x, []).append(run["summary"]["test"][metric])
    if not lines:
        return None
    draw_curves(lines, unit if by_budget else "width", mark, path, metric)
    what = f"{unit} trained on (log scale)" if by_budget else "width"
    return f"Test {metric} against {what}, every grid point (mean over seeds, error bars: 95% interval)"


def draw_curves(lines: dict[str, dict[float, list[float]]], field: str, mark: tuple[float, str] | None, path: Path,
                metric: str = "accuracy") -> None:
    """One line per label: the test `metric` (mean over its runs, 95% interval, clipped to the
    metric's range) at each x ("sequences", "tokens" or "width": `field`), with a paper's
    `mark` (x, label) drawn as a dashed line (None: nothing marked); x on a log scale."""
    low_bound, high_bound = metric_bounds(metric) or (-math.inf, math.inf)
    fig, ax = plt.subplots(figsize=(7, 4))
    for label, points in sorted(lines.items()):
        xs = sorted(points)
        stats = [summarize(points[x]) for x in xs]
        below = [0.0 if s.n < 2 else s.mean - max(s.low, low_bound) for s in stats]
        above = [0.0 if s.n < 2 else min(s.high, high_bound) - s.mean for s in stats]
        ax.errorbar(xs, [s.mean for s in stats], yerr=[below, above], marker="o", capsize=3, label=label)
    if mark is not None:
        ax.axvline(mark[0], color="grey", linestyle="--", label=mark[1])
    ax.set(xscale="log", xlabel="width (d_model)" if field == "width" else f"{field} trained on",
           ylabel=f"test {metric}")
    if math.isfinite(low_bound) and math.isfinite(high_bound):  # a bounded metric (accuracy): its whole range
        ax.set_ylim(low_bound - 0.02, high_bound + 0.02)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    save_figure(fig, path)
