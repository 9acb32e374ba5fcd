"""Which knowledge entries each layer reads: score sparsity per layer, the entries that carry
most of a layer's score mass, how much the layers' favourite entries overlap, and the
entries most used per input token.

Every layer of the knowledge variant writes its scores S (B, T, n_E) to the hook point
`blocks.{i}.ffn.scores`; this module only reads them through `capture`. An entry is
*active* for a token when |S| exceeds `rel_tol` times the layer's largest |S| on the data
(for ReLU the inactive scores are exactly zero; GELU, SiLU and the gated form are never
exactly zero, hence the relative tolerance). An entry's *mass* in a layer is its mean |S|
over tokens; a layer's top entries are those with the largest share of its total mass.

`modformer usage RUN_DIR_OR_CHECKPOINT` runs this on the task's validation inputs and
writes usage.md (tables), usage.json and usage.png.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from torch import nn

from ..errors import ModformerError
from ..files import atomic_write_text, output_folder
from ..model.hooks import capture
from ..model.knowledge import KnowledgeFFN
from ..version import code_version, machine
from .common import by_layer, evaluating, model_device, plt, save_figure

SCORES = "blocks.*.ffn.scores"


@dataclass
class LayerUsage:
    layer: int
    active_fraction: float  # mean over tokens of the fraction of entries active for the token
    entries_used: int  # entries active for at least one token
    top_entries: list[tuple[int, float]]  # (entry, share of the layer's score mass), largest first
    top_share: float  # share of the layer's mass carried by its top-k entries


@dataclass
class Usage:
    n_entries: int
    tokens: int
    rel_tol: float
    layers: list[LayerUsage]
    mass: list[list[float]]  # (n_layers, n_E): each layer's mean |S| per entry
    overlap: list[list[float | None]]  # (n_layers, n_layers): Jaccard overlap of top-k entry sets (None: other base)
    per_token: dict[int, list[list[int]]]  # token id -> per layer, its top entries by mean |S|


def entry_usage(model: nn.Module, inputs: torch.Tensor, *, top_k: int = 5, rel_tol: float = 1e-3,
                batch_size: int = 256, frequent_tokens: int = 8) -> Usage:
    """Usage of the shared base by every knowledge layer on `inputs` (N, T) token ids.

    `per_token` covers the `frequent_tokens` most frequent ids in `inputs`.

    Args:
        model: a knowledge-variant model (at least one `KnowledgeFFN`), each knowledge layer
            writing its scores (B, T, n_E) to the hook point `blocks.{i}.ffn.scores`; it runs
            in eval mode without gradients.
        inputs: the token ids read, (N, T), N >= 1.
        top_k: how many entries of largest mass each layer's top set holds (at most n_E).
        rel_tol: an entry is active for a token when its |score| exceeds `rel_tol` times the
            layer's largest |score| over all of `inputs`.
        batch_size: rows of `inputs` per forward pass.
        frequent_tokens: how many of the most frequent token ids `per_token` covers.

    Returns:
        The `Usage`: n_E, the number of tokens read, `rel_tol`; per layer its `LayerUsage`
            (fraction of entries active per token, entries ever active, top-k entries with their
            share of the mass, and the top-k's total share); `mass` (n_layers, n_E), each entry's
            mean |score| per layer; `overlap` (n_layers, n_layers), the Jaccard overlap of the
            layers' top-k sets (None for layers reading different bases); and `per_token`, for each
            frequent token id, per layer its top-k entries by mean |score|.
    """
    if top_k < 1:
        raise ModformerError(f"top_k must be positive, got {top_k}")
    if inputs.ndim != 2 or inputs.shape[0] == 0:
        raise ValueError(f"inputs must be a non-empty (N, T) tensor of token ids, got shape {tuple(inputs.shape)}")
    if not any(isinstance(m, KnowledgeFFN) for m in model.modules()):
        raise ModformerError("the model has no knowledge layers: entry usage needs the knowledge variant")
    device = model_device(model)
    chunks: list[list[torch.Tensor]] = []
    with evaluating(model):
        for start in range(0, inputs.shape[0], batch_size):
            with capture(model, SCORES) as acts:
                model(inputs[start:start + batch_size].to(device))
            chunks.append([s.detach().abs().float().cpu().flatten(0, 1) for s in by_layer(acts)])
    scores = [torch.cat(per_layer) for per_layer in zip(*chunks)]  # per layer (N*T, n_E)
    flat_tokens = inputs.reshape(-1).cpu()
    ids, counts = flat_tokens.unique(return_counts=True)
    frequent = ids[counts.argsort(descending=True)[:frequent_tokens]].tolist()

    layers, mass, top_sets = [], [], []
    k = min(top_k, scores[0].shape[1])
    for i, s in enumerate(scores):
        active = s > rel_tol * s.max().clamp_min(torch.finfo(s.dtype).tiny)
        m = s.mean(0)
        share = m / m.sum().clamp_min(torch.finfo(m.dtype).tiny)
        top = share.topk(k)
        layers.append(LayerUsage(i, active.float().mean().item(), int(active.any(0).sum()),
                                 [(int(e), float(v)) for e, v in zip(top.indices, top.values)], float(top.values.sum())))
        mass.append(m.tolist())
        top_sets.append(set(top.indices.tolist()))
    # Entry j of one base has nothing to do with entry j of another (model.knowledge.groups).
    base_of = [id(m.base) for m in model.modules() if isinstance(m, KnowledgeFFN)]
    overlap = [[len(a & b) / len(a | b) if base_of[i] == base_of[j] else None for j, b in enumerate(top_sets)]
               for i, a in enumerate(top_sets)]
    per_token = {tok: [s[flat_tokens == tok].mean(0).topk(k).indices.tolist() for s in scores] for tok in frequent}
    return Usage(scores[0].shape[1], flat_tokens.numel(), rel_tol, layers, mass, overlap, per_token)


def markdown(usage: Usage) -> str:
    lines = ["# Knowledge-base entry usage", "",
             f"{usage.tokens:,} tokens; n_E = {usage.n_entries}; an entry is active for a token when |score| > "
             f"{usage.rel_tol:g} x the layer's largest |score|.", "",
             "| layer | active entries per token | entries ever active | top entries (share of score mass) | "
             "share of the top entries |", "|---|---|---|---|---|"]
    for layer in usage.layers:
        tops = ", ".join(f"{e} ({v:.1%})" for e, v in layer.top_entries)
        lines.append(f"| {layer.layer} | {layer.active_fraction:.1%} ({layer.active_fraction * usage.n_entries:.1f}) | "
                     f"{layer.entries_used} of {usage.n_entries} | {tops} | {layer.top_share:.1%} |")
    n = len(usage.layers)
    lines += ["", "Overlap of the layers' top entries (Jaccard; - for layers reading different bases):", "",
              "| layer | " + " | ".join(map(str, range(n))) + " |", "|---" * (n + 1) + "|"]
    lines += [f"| {i} | " + " | ".join("-" if v is None else f"{v:.2f}" for v in row) + " |"
              for i, row in enumerate(usage.overlap)]
    lines += ["", "Entries most used per token (most frequent input tokens; top entries per layer):", "",
              "| token | " + " | ".join(f"layer {i}" for i in range(n)) + " |", "|---" * (n + 1) + "|"]
    lines += [f"| {tok} | " + " | ".join(", ".join(map(str, e)) for e in per_layer) + " |"
              for tok, per_layer in usage.per_token.items()]
    return "\n".join(lines) + "\n"


def plot(usage: Usage, path: Path) -> None:
    mass = torch.tensor(usage.mass)
    share = mass / mass.sum(1, keepdim=True).clamp_min(1e-30)  # layers' scores differ in scale
    share = share[:, share.sum(0).argsort(descending=True)]
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 0.6 * len(usage.layers) + 2.5),
                                      gridspec_kw={"width_ratios": [3, 1]})
    image = left.imshow(share.numpy(), aspect="auto", interpolation="nearest", cmap="viridis")
    left.set(xlabel="entry (sorted by its share summed over layers)", ylabel="layer",
             title="share of each layer's score mass per entry", yticks=range(len(usage.layers)))
    fig.colorbar(image, ax=left)
    right.barh(range(len(usage.layers)), [layer.active_fraction for layer in usage.layers])
    right.set(xlabel="active entries per token (fraction)", yticks=range(len(usage.layers)), xlim=(0, 1))
    right.invert_yaxis()
    fig.tight_layout()
    save_figure(fig, path)


def write_usage(usage: Usage, out: Path, source: str | Path | None = None) -> Path:
    """usage.json, usage.md and usage.png in `out`, each saying what made it (the run read,
    modformer's code version and the machine).

    Args:
        usage: what `entry_usage` measured.
        out: the folder to write to (made if missing).
        source: the run directory or checkpoint the usage was measured on, named in the
            files; None: not named.

    Returns:
        The path of usage.md, `out / "usage.md"`.
    """
    out = output_folder(out)
    made = {"source": None if source is None else str(source), "code_version": code_version(), "machine": machine()}
    atomic_write_text(out / "usage.json", json.dumps({**made, **asdict(usage)}, indent=1))
    head = (f"Made by modformer {made['code_version']} on {made['machine']}"
            + (f", from `{source}`" if source is not None else "") + ".\n\n")
    atomic_write_text(out / "usage.md", head + markdown(usage) + "\n![usage](usage.png)\n")
    plot(usage, out / "usage.png")
    return out / "usage.md"
