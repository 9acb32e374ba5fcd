"""Training-curve plots of a run directory's metrics."""

from __future__ import annotations

from pathlib import Path

from ..figures import plt, save_figure
from .records import read_records


def plot_training_curves(metrics_path: Path, png_path: Path, title: str = "") -> None:
    """Training loss, validation loss and validation accuracy against step."""
    records = list(read_records(metrics_path))
    train = [r for r in records if r.get("kind") == "train"]
    evals = [r for r in records if r.get("kind") == "eval" and r.get("split") == "validation"]
    fig, (ax_loss, ax_acc) = plt.subplots(1, 2, figsize=(10, 4))
    if train:
        ax_loss.plot([r["step"] for r in train], [r["loss"] for r in train], label="train")
    if evals:
        ax_loss.plot([r["step"] for r in evals], [r["loss"] for r in evals], "o-", label="validation")
        scored = [r for r in evals if "accuracy" in r]  # a task without accuracy (a regression) leaves it empty
        if scored:
            ax_acc.plot([r["step"] for r in scored], [r["accuracy"] for r in scored], "o-", label="validation")
    ax_loss.set(xlabel="step", ylabel="cross-entropy", yscale="log", title="loss")
    ax_acc.set(xlabel="step", ylabel="accuracy", ylim=(0, 1.02), title="validation accuracy")
    for ax in (ax_loss, ax_acc):
        ax.grid(alpha=0.3)
        if ax.lines:  # a run stopped before its first evaluation has nothing on the accuracy panel
            ax.legend()
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    save_figure(fig, png_path)
