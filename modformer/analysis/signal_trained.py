"""Token similarity of trained models, beside the same models at initialisation.

`modformer signal` measures freshly built models on random tokens. This measures trained
runs (`modformer signal --runs SWEEP_OR_RUN`): each run's latest checkpoint, and the model
that run started from (`build_model(cfg.model, cfg.train.seed)`, what the trainer builds
before its first step), on the same fixed inputs: the first N examples of the run's task's
held-out test set. In each example it counts the positions up to its last scored one (the
input the answer depends on; the padding after it is left out, `scored_prefix`). After the
embedding (`embed_out`) and after every block (`blocks.{i}.resid_post`, before the final
norm) it takes `token_similarity` (signal.py's module docstring defines the mean
off-diagonal covariance and cosine and the mean variance).

The inputs are the task's, not random tokens: a small vocabulary repeats tokens, so the
cosine is not about 0 at the input, and the figures are not on the scale of `modformer
signal`'s. Compare a trained model with its own initialisation, which sees the same inputs.

Here are the measure of one model, one run's record, and a sweep's table and figure; the
loading of runs is above this layer (`modformer.analysis_commands`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

import torch
from torch import nn

from ..model.hooks import capture
from ..stats import summarize
from ..tasks.base import IGNORE, Batch
from .common import by_layer, evaluating, plt, save_figure
from .signal import MEASURES, token_similarity

STAGES = ("trained", "init")


def scored_prefix(targets: torch.Tensor) -> torch.Tensor:
    """targets (B, T), IGNORE where not scored -> (B, T) bool: True at positions 0..t of each
    example, t its last scored position (all False in an example that scores nothing).

    Args:
        targets: the targets (B, T), or (B, T, k) for a task with vector targets, as a
            task's `Batch` holds them.

    Returns:
        The mask (B, T), True at each example's positions up to its last scored one.
    """
    B, T = targets.shape[:2]
    scored = (targets != IGNORE).reshape(B, T, -1).any(-1)  # a task with vector targets: (B, T, k)
    positions = torch.arange(T, device=targets.device)
    last = torch.where(scored, positions, -1).amax(dim=-1)  # (B,)
    return positions[None, :] <= last[:, None]


def layer_similarity(model: nn.Module, tokens: torch.Tensor, mask: torch.Tensor | None = None) -> dict[str, Any]:
    """Token similarity after the embedding and after every block of `model` on `tokens`.

    Args:
        model: a modformer model (hook points `embed_out` and `blocks.{i}.resid_post`).
        tokens: token ids (B, T).
        mask: (B, T) bool, the positions counted (`token_similarity`); None: all.

    Returns:
        `{"covariance", "cosine", "variance"}` after the last block, `"embedding"`: the three
            after the embedding, and `"by_layer"`: {measure: [block 0, ..., block L-1]}.
    """
    with evaluating(model), capture(model, "embed_out", "blocks.*.resid_post") as acts:
        model.hidden_states(tokens)
    embedding = token_similarity(acts.pop("embed_out"), mask)
    blocks = [token_similarity(h, mask) for h in by_layer(acts)]
    return {**blocks[-1], "embedding": embedding, "by_layer": {m: [b[m] for b in blocks] for m in MEASURES}}


def run_signal(trained: nn.Module, initial: nn.Module, batch: Batch) -> dict[str, Any]:
    """One run's record: `layer_similarity` of the trained model and of its initialisation on
    the same inputs, counting each example's positions up to its last scored one.

    Args:
        trained: the trained model.
        initial: the same architecture at initialisation (the run's own seed).
        batch: the inputs (B, T) and targets (B, T) both models read.

    Returns:
        `examples` (B), `positions` (the mean number counted per example), and `trained` and
            `init`, each `layer_similarity`'s record.
    """
    mask = scored_prefix(batch.targets)
    return {"examples": len(batch), "positions": mask.sum(-1).double().mean().item(),
            **{stage: layer_similarity(model, batch.inputs, mask)
               for stage, model in zip(STAGES, (trained, initial))}}


def _cell(values: Sequence[float]) -> dict[str, float]:
    s = summarize(list(values))
    return {"mean": s.mean, "std": s.std}


def group_runs(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Seeds pooled per setting: mean and sample std of the last block's measures, trained and
    at init, and of the test accuracy.

    Args:
        rows: one per run, with `variant`, `construction`, `depth`, `setting` (the label of any
            other grid values, "" where none), `seed`, `accuracy` (None for a task without one) and `record` (`run_signal`'s).

    Returns:
        One dict per setting, in the order first met: the four keys above, `seeds` (sorted),
            `accuracy` and `{stage}.{measure}` as `{"mean", "std"}`.
    """
    groups: dict[tuple, list[dict[str, Any]]] = {}
    for row in rows:
        groups.setdefault((row["variant"], row["construction"], row["depth"], row["setting"]), []).append(row)
    out = []
    for (variant, construction, depth, setting), runs in groups.items():
        group = {"variant": variant, "construction": construction, "depth": depth, "setting": setting,
                 "seeds": sorted(r["seed"] for r in runs),
                 "accuracy": None if any(r["accuracy"] is None for r in runs) else _cell([r["accuracy"] for r in runs])}
        for stage in STAGES:
            group[stage] = {m: _cell([r["record"][stage][m] for r in runs]) for m in MEASURES}
        out.append(group)
    return out


def _fmt(cell: dict[str, float] | None, percent: bool = False) -> str:
    if cell is None:  # a task with no accuracy (a regression)
        return "n/a"
    if percent:
        return f"{100 * cell['mean']:.1f}% ± {100 * cell['std']:.1f}"
    return f"{cell['mean']:.3g} ± {cell['std']:.2g}"


def markdown_table(groups: Sequence[dict[str, Any]]) -> str:
    """One row per setting: test accuracy and each measure after the last block, trained and
    at init, 'mean ± std' over seeds.

    Args:
        groups: `group_runs`' records.

    Returns:
        The table as Markdown text.
    """
    head = ["variant", "construction", "depth", *(["setting"] if any(g["setting"] for g in groups) else []),
            "seeds", "test accuracy"] + [f"{m} {stage}" for m in MEASURES for stage in STAGES]
    lines = ["| " + " | ".join(head) + " |", "|---|---|---:|" + "---|" * (len(head) - 3)]
    for g in groups:
        cells = [g["variant"], g["construction"], str(g["depth"]), *([g["setting"]] if "setting" in head else []),
                 str(len(g["seeds"])), _fmt(g["accuracy"], percent=True)]
        cells += [_fmt(g[stage][m]) for m in MEASURES for stage in STAGES]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def plot_trained_signal(groups: Sequence[dict[str, Any]], path: str | Path, title: str = "") -> Path:
    """Each measure after the last block against depth (log2 x), one colour per variant,
    construction and setting: trained solid, at init dashed, ±std bars. Written atomically.

    Args:
        groups: `group_runs`' records.
        path: the PNG file to write.
        title: the figure's title; empty: a default one.

    Returns:
        `path`, as a `Path`.
    """
    lines: dict[tuple, list[dict[str, Any]]] = {}
    for g in groups:
        lines.setdefault((g["variant"], g["construction"], g["setting"]), []).append(g)
    fig, axes = plt.subplots(1, len(MEASURES), figsize=(4.8 * len(MEASURES), 5.0))
    for ax, measure in zip(axes, MEASURES):
        for k, (key, rows) in enumerate(lines.items()):
            rows = sorted(rows, key=lambda g: g["depth"])
            label = " ".join(str(part) for part in key if part)
            for stage, style in zip(STAGES, ("-", "--")):
                ax.errorbar([g["depth"] for g in rows], [g[stage][measure]["mean"] for g in rows],
                            yerr=[g[stage][measure]["std"] for g in rows], color=f"C{k % 10}", linestyle=style,
                            marker="o" if stage == "trained" else "x", capsize=3, label=f"{label}, {stage}")
        ax.set_xscale("log", base=2)
        if measure != "cosine" and all(g[s][measure]["mean"] > 0 for g in groups for s in STAGES):
            ax.set_yscale("log")
        where = "diagonal" if measure == "variance" else "off-diagonal"
        ax.set(xlabel="depth (blocks)", ylabel=f"mean {where} {measure}", title=measure)
        ax.grid(alpha=0.3)
    handles, labels = axes[0].get_legend_handles_labels()  # below the panels, clear of the curves
    fig.legend(handles, labels, loc="lower center", ncol=min(4, len(labels)), fontsize=8)
    fig.suptitle(title or "token similarity after the last block: trained (solid) and at init (dashed)")
    fig.tight_layout(rect=(0, 0.06 * (1 + (len(labels) - 1) // 4), 1, 1))
    return save_figure(fig, path)
