"""Induction-head scores and attention-map plots.

The score is TransformerLens's: feed random tokens repeated twice,

    tokens = [r_0, ..., r_{L-1}, r_0, ..., r_{L-1}]        (length 2L, no BOS)

and for every position i of the second copy (L <= i < 2L) read the attention weight from
i to i - L + 1, the position right after the earlier occurrence of the current token: an
induction head attends there to predict the next token. A head's score is the mean of
those weights over the L positions and the batch; 1 is a perfect induction head and
uniform causal attention scores the mean of 1/(i+1).

Unlike TransformerLens there is no BOS token in front (our models have none), so the stripe
has L entries rather than L + 1. Tokens within a copy are distinct when the vocabulary
allows (see `random_tokens`): a repeated token inside a copy would give the head a second,
equally valid target and blur the score.

Attention weights are read only through `capture(model, "blocks.*.mixer.pattern")`, so
any mixer that exposes a (B, H, T, T) pattern is scored: softmax attention, or MixiT's
fixed mixing matrix.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Sequence

import torch
from torch import nn

from ..errors import ConfigError, ModformerError
from ..model.hooks import capture, hook_names
from .common import by_layer, evaluating, model_device, model_max_seq_len, plt, random_tokens, save_figure

PATTERNS = "blocks.*.mixer.pattern"


def induction_scores(model: nn.Module, *, vocab_size: int, half_len: int, batch: int = 64,
                     generator: torch.Generator) -> torch.Tensor:
    """Per-head induction scores, (n_layers, n_heads) float32 on the CPU.

    model: maps tokens (B, T) int64 to anything, with `blocks.{i}.mixer.pattern` hook
    points that yield (B, H, T, T). Tokens are drawn from [0, vocab_size) with `generator`
    only (the global RNG is untouched). The model runs in eval mode without gradients; each
    module's training flag is restored afterwards.

    Args:
        model: the model scored, with a `blocks.{i}.mixer.pattern` hook point in every block.
        vocab_size: token ids are drawn from [0, vocab_size); at most the model's `vocab_size`.
        half_len: length L of each copy; the model reads (batch, 2L) tokens, within its
            `max_seq_len`.
        batch: number of random sequences B.
        generator: the only source of the random tokens.

    Returns:
        The scores, (n_layers, n_heads) float32 on the CPU: each head's mean attention weight
            from each position of the second copy to the position after its token's first occurrence.
    """
    if half_len < 1 or batch < 1:
        raise ValueError(f"half_len and batch must be positive, got half_len={half_len}, batch={batch}")
    model_vocab = getattr(model, "vocab_size", None)
    if isinstance(model_vocab, int) and not 1 <= vocab_size <= model_vocab:
        raise ValueError(f"vocab_size={vocab_size} must be between 1 and the model's vocabulary ({model_vocab})")
    T = 2 * half_len
    limit = model_max_seq_len(model)
    if limit is not None and T > limit:
        raise ValueError(f"the repeated sequence has length 2 * half_len = {T}, longer than the model's "
                         f"max_seq_len={limit}; use half_len <= {limit // 2}")
    first = random_tokens(batch, half_len, vocab_size, generator)  # (B, L)
    tokens = torch.cat([first, first], dim=1).to(model_device(model))  # (B, 2L)
    queries = torch.arange(half_len, T)  # positions of the second copy
    keys = queries - half_len + 1  # right after each token's earlier occurrence
    with evaluating(model), capture(model, PATTERNS) as acts:
        model(tokens)
    scores = [pattern[:, :, queries, keys].float().mean(dim=(0, 2)) for pattern in by_layer(acts)]  # each (H,)
    return torch.stack(scores).cpu()


def check_induction_scores(model: nn.Module, *, vocab_size: int, half_len: int, key: str) -> None:
    """Score the model once on one short sequence, so that a model that cannot be scored (a
    mixer without a `pattern` hook point of shape (B, H, T, T), a sequence too short) is one
    ConfigError naming `key` before training, not a failure at the first evaluation.

    Args:
        model: the model to check, as `induction_scores` takes it.
        vocab_size: token ids are drawn from [0, vocab_size).
        half_len: length L of each copy of the scored sequence.
        key: the config key that asked for the scores, named in the error.

    Raises:
        ConfigError: a block's mixer has no `pattern` hook point, or scoring fails.
    """
    points = set(hook_names(model))
    lacking = [i for i in range(len(getattr(model, "blocks", ()))) if f"blocks.{i}.mixer.pattern" not in points]
    if lacking:
        raise ConfigError(f"{key} reads each block's attention pattern, a hook point `pattern` of its mixer "
                          f"(blocks.i.mixer.pattern, yielding (B, heads, T, T)); the mixer of block(s) "
                          f"{', '.join(map(str, lacking))} ({type(model.blocks[lacking[0]].mixer).__name__}) has "
                          f"none: add `self.pattern = HookPoint()` and pass the weights through it, or drop {key}")
    try:
        induction_scores(model, vocab_size=vocab_size, half_len=half_len, batch=1,
                         generator=torch.Generator(model_device(model)).manual_seed(0))
    except (ValueError, RuntimeError, IndexError, ModformerError) as e:
        raise ConfigError(f"{key} cannot score this model: {e.__class__.__name__}: {e}") from None


def attention_patterns(model: nn.Module, tokens: torch.Tensor) -> torch.Tensor:
    """tokens (T,) or (1, T) -> patterns (n_layers, n_heads, T, T) float32 on the CPU.

    Args:
        model: a model with a `blocks.{i}.mixer.pattern` hook point in every block; it runs in
            eval mode without gradients.
        tokens: one sequence of token ids, (T,) or (1, T).

    Returns:
        Every layer's attention patterns (n_layers, n_heads, T, T), float32 on the CPU, query
            positions along dim 2 and key positions along dim 3.
    """
    tokens = torch.as_tensor(tokens)
    if tokens.dim() == 1:
        tokens = tokens.unsqueeze(0)
    if tokens.dim() != 2 or tokens.shape[0] != 1:
        raise ValueError(f"expected one sequence, shape (T,) or (1, T); got {tuple(tokens.shape)}")
    with evaluating(model), capture(model, PATTERNS) as acts:
        model(tokens.to(model_device(model)))
    return torch.stack([p[0].float().cpu() for p in by_layer(acts)])


def plot_attention_maps(model: nn.Module, tokens: torch.Tensor, path: str | Path, title: str = "") -> Path:
    """A PNG grid (rows: layers, columns: heads) of one sequence's attention patterns.

    tokens: (T,) or (1, T). All panels share one colour scale, so heads compare directly;
    it spans [0, 1] for softmax attention and widens for mixing matrices with entries
    outside it. Written atomically; returns the path.

    Args:
        model: a model with a `blocks.{i}.mixer.pattern` hook point in every block.
        tokens: one sequence of token ids, (T,) or (1, T).
        path: the PNG file to write (its folder is created).
        title: the figure's title; empty: "attention patterns (T=...)".

    Returns:
        `path`, as a `Path`.
    """
    patterns = attention_patterns(model, tokens)  # (n_layers, n_heads, T, T)
    n_layers, n_heads, T, _ = patterns.shape
    vmin, vmax = min(0.0, patterns.min().item()), max(1.0, patterns.max().item())
    size = min(3.0, max(1.6, 12.0 / n_heads))
    fig, axes = plt.subplots(n_layers, n_heads, figsize=(size * n_heads + 1.0, size * n_layers + 0.6),
                             squeeze=False)
    image = None
    for layer in range(n_layers):
        for head in range(n_heads):
            ax = axes[layer][head]
            image = ax.imshow(patterns[layer, head].numpy(), vmin=vmin, vmax=vmax, cmap="viridis",
                              interpolation="nearest")
            ax.set_xticks([])
            ax.set_yticks([])
            if layer == 0:
                ax.set_title(f"head {head}", fontsize=9)
            if head == 0:
                ax.set_ylabel(f"layer {layer}\nquery", fontsize=9)
            if layer == n_layers - 1:
                ax.set_xlabel("key", fontsize=9)
    fig.colorbar(image, ax=axes, shrink=0.8, label="weight")
    fig.suptitle(title or f"attention patterns (T={T})")
    return save_figure(fig, path)


def plot_induction_scores(records: Sequence[tuple[int, torch.Tensor]], path: str | Path,
                          title: str = "induction scores") -> Path:
    """Each head's induction score against training step; one panel per layer.

    records: (step, scores) pairs, scores (n_layers, n_heads) as a tensor or nested lists
    (as read back from a JSON log); all must have the same shape. Written atomically.

    Args:
        records: (step, scores) pairs, at least one, in any order (plotted by step).
        path: the PNG file to write (its folder is created).
        title: the figure's title.

    Returns:
        `path`, as a `Path`.
    """
    if not records:
        raise ValueError("plot_induction_scores needs at least one (step, scores) record")
    ordered = sorted(((int(step), torch.as_tensor(scores, dtype=torch.float32)) for step, scores in records),
                     key=lambda r: r[0])
    shape = ordered[0][1].shape
    if len(shape) != 2 or any(s.shape != shape for _, s in ordered):
        raise ValueError(f"every record's scores must have the same (n_layers, n_heads) shape; "
                         f"got {sorted({tuple(s.shape) for _, s in ordered})}")
    steps = [step for step, _ in ordered]
    table = torch.stack([s for _, s in ordered])  # (n_records, n_layers, n_heads)
    n_layers, n_heads = shape
    cols = min(n_layers, 4)
    rows = math.ceil(n_layers / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.0 * cols, 3.2 * rows), squeeze=False, sharey=True)
    for layer in range(n_layers):
        ax = axes[layer // cols][layer % cols]
        for head in range(n_heads):
            ax.plot(steps, table[:, layer, head].numpy(), "o-" if len(steps) < 30 else "-",
                    markersize=3, label=f"head {head}")
        ax.set(title=f"layer {layer}", xlabel="step", ylabel="induction score")
        ax.grid(alpha=0.3)
    for extra in range(n_layers, rows * cols):
        axes[extra // cols][extra % cols].set_visible(False)
    axes[0][0].legend(fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    return save_figure(fig, path)
