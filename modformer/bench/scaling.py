"""Training throughput and peak memory as width, depth and sequence length grow, for every
contender.

One axis at a time moves away from a base shape (the others stay at the base); at each
point the contenders of `llama_throughput` are timed side by side, so each curve's points
compare within a point, and the curves' shapes across points. Writes a table and a plot
of tokens per second (top row) and peak memory of a training step (bottom row) against
each axis.
"""

from __future__ import annotations

from pathlib import Path

from ..figures import plt, save_figure
from .llama import ThroughputRow, llama_throughput, mib

AXES = {"width": "d_model", "depth": "n_layers", "seq": "seq_len"}


def scaling(values: dict[str, list[int]], *, base: dict[str, int], precision: str = "fp32", hf: bool = True,
            variants: tuple[str, ...] = ("frozen_qk", "mixit"), checkpointing: bool = False,
            repeats: int = 3) -> list[tuple[str, int, ThroughputRow]]:
    """(axis, value, row) for every axis value and contender; `base` holds d_model,
    n_layers, n_heads, batch and seq_len."""
    out = []
    for axis, points in values.items():
        for value in points:
            shape = {**base, AXES[axis]: value}
            rows = llama_throughput(precisions=(precision,), variants=variants, hf=hf, checkpointing=checkpointing,
                                    repeats=repeats, **shape)
            out += [(axis, value, r) for r in rows if not r.contender.startswith("matmul peak")]
    return out


def markdown(points: list[tuple[str, int, ThroughputRow]]) -> str:
    lines = ["| axis | value | contender | tokens/s | MFU | peak MiB |", "|---|---|---|---|---|---|"]
    lines += [f"| {axis} | {value} | {r.contender} | {r.tokens_per_s:,.0f} | {r.mfu:.1%} | {mib(r.peak_mib)} |"
              for axis, value, r in points]
    return "\n".join(lines) + "\n"


def plot(points: list[tuple[str, int, ThroughputRow]], path: Path) -> None:
    axes_used = list(dict.fromkeys(axis for axis, _, _ in points))
    fig, axes = plt.subplots(2, len(axes_used), figsize=(5 * len(axes_used), 8), squeeze=False)
    for column, axis in enumerate(axes_used):
        for row, (measure, label) in enumerate((("tokens_per_s", "training tokens/s"),
                                                ("peak_mib", "peak memory of a step (MiB)"))):
            ax = axes[row][column]
            for name in dict.fromkeys(r.contender for a, _, r in points if a == axis):
                xs = [(v, getattr(r, measure)) for a, v, r in points if a == axis and r.contender == name]
                ax.plot([x for x, _ in xs], [y for _, y in xs], marker="o", label=name)
            ax.set(xlabel=axis, ylabel=label, xscale="log", yscale="log")
            ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=8)
    fig.tight_layout()
    save_figure(fig, path)
