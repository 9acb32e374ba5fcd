"""Fold knowledge layers into ordinary FFNs and unfold FFNs into knowledge layers over ONE base.

Notation in torch's weight layout: an FFN computes down(act(x W_up^T + b_up)) with W_up
(n, d), W_down (d, n); a knowledge layer has q_proj.weight A_q (d_k, d), k_proj.weight A_k
(d_k, d_E), v_proj.weight A_v (d, d_E) over E (n_E, d_E). Then, exactly,

    W_up = (E A_k^T) A_q / sqrt(d_k),   b_up = b1(E),   W_down = (E A_v^T)^T,   b_down = b2

so every matrix an FFN has along its hidden units is E times a per-layer matrix: unfolding
is writing the FFNs' stacked hidden-unit matrices X = [W_up_l, W_down_l^T, b_up_l, ...] as
E C. With E = I (n_E = d_E = d_ff) that is exact for any FFNs; a smaller d_E is a low-rank
factorization of X, exact when rank(X) <= d_E (`unfold_approximate`).
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass, replace

import torch
import torch.nn.functional as F
from torch import nn

from ..errors import ModformerError
from ..model.config import ModelConfig
from ..model.feedforward import ActivationFFN, ReLUFFN, SwiGLU
from ..model.knowledge import BroadcastBias, KnowledgeBase, KnowledgeConfig, KnowledgeFFN, TokenThresholdRead
from ..model.transformer import Transformer

_POINTWISE = {"relu": F.relu, "gelu": F.gelu, "silu": F.silu}


def _new(make, like: torch.Tensor) -> nn.Module:
    """Build a module without drawing from the global RNG (on `meta`), on like's device and dtype;
    every parameter is overwritten by the caller."""
    with torch.device("meta"):
        module = make()
    return module.to_empty(device=like.device).to(like.dtype)


def fold(layer: KnowledgeFFN) -> nn.Module:
    """The ordinary FFN computing what `layer` computes over its base's current E.

    relu -> ReLUFFN, gelu/silu -> ActivationFFN, swiglu -> SwiGLU, all with biases, on E's
    device and dtype. Exact up to rounding (a different order of the same products).

    Args:
        layer: the knowledge layer to fold (threshold mlp, linear or none; a per-token
            threshold, `token`, raises `ModformerError`). Its base's entries E (n_E, d_E) are
            read as they are now; neither the layer nor E is changed.

    Returns:
        A new FFN (d_model -> n_E hidden units -> d_model) whose up (and gate) projection is
            (E W_K^T) W_Q / sqrt(d_k) with bias b1(E) and whose down projection is (E W_V^T)^T with
            bias b2; it maps (B, T, d_model) to (B, T, d_model) as `layer` does.
    """
    if any(isinstance(getattr(layer, r), TokenThresholdRead) for r in layer.reads):
        raise ModformerError("a knowledge layer with a per-token threshold (model.knowledge.threshold=token) "
                             "depends on each token beyond its scores, so it is not an FFN and cannot fold")
    entries = layer.base.entries.detach()
    n, d = entries.shape[0], layer.v_proj.out_features
    makers = {"relu": lambda: ReLUFFN(d, n, bias=True), "swiglu": lambda: SwiGLU(d, n, bias=True)}
    ffn = _new(makers.get(layer.activation, lambda: ActivationFFN(d, n, layer.activation, bias=True)), entries)
    with torch.no_grad():
        for name in layer.reads:  # "up", and "gate" for swiglu
            read, proj = getattr(layer, name), getattr(ffn, f"{name}_proj")
            proj.weight.copy_(read.k_proj(entries) @ read.q_proj.weight * read.scale)  # (n, d_k)(d_k, d)
            proj.bias.copy_(read.threshold(entries))
        ffn.down_proj.weight.copy_(layer.v_proj(entries).mT)
        ffn.down_proj.bias.copy_(layer.bias)
    return ffn


@dataclass
class _Parts:
    """One FFN's weights in float64: weights[name] (n, d) and biases[name] (n,) for the reads
    ("up", and "gate" when gated), W_down (d, n), b_down (d,). Missing biases are zeros."""

    activation: str
    weights: dict[str, torch.Tensor]
    biases: dict[str, torch.Tensor]
    W_down: torch.Tensor
    b_down: torch.Tensor


def _activation(ffn: nn.Module, gated: bool) -> str:
    """Our FFNs by type; others (Hugging Face MLPs) by evaluating `act_fn` on a grid."""
    if isinstance(ffn, SwiGLU):
        return "swiglu"
    if isinstance(ffn, ActivationFFN):  # ReLUFFN among them
        return ffn.activation
    act = getattr(ffn, "act_fn", None)
    if callable(act):
        grid = torch.linspace(-8.0, 8.0, 161, dtype=torch.float64)
        for name, f in _POINTWISE.items():
            if torch.allclose(act(grid), f(grid), rtol=0.0, atol=1e-12):
                if not gated:
                    return name
                if name == "silu":
                    return "swiglu"
    raise ModformerError(f"cannot unfold {type(ffn).__name__}: its activation is not relu, gelu (erf) or silu, "
                         f"nor silu-gated")


def _parts(ffn: nn.Module) -> _Parts:
    if isinstance(ffn, KnowledgeFFN):
        raise ModformerError("this is already a knowledge layer (fold it first)")
    gated = isinstance(getattr(ffn, "gate_proj", None), nn.Linear)
    if not all(isinstance(getattr(ffn, a, None), nn.Linear) for a in ("up_proj", "down_proj")):
        raise ModformerError(f"cannot unfold {type(ffn).__name__}: it needs Linear up_proj and down_proj")
    activation = _activation(ffn, gated)

    def weight_bias(linear: nn.Linear) -> tuple[torch.Tensor, torch.Tensor]:
        w = linear.weight.detach().double()
        b = linear.bias.detach().double() if linear.bias is not None else w.new_zeros(w.shape[0])
        return w, b

    reads = ("gate", "up") if gated else ("up",)
    pairs = {r: weight_bias(getattr(ffn, f"{r}_proj")) for r in reads}
    W_down, b_down = weight_bias(ffn.down_proj)
    return _Parts(activation, {r: p[0] for r, p in pairs.items()}, {r: p[1] for r, p in pairs.items()},
                  W_down, b_down)


def _set_threshold(module: nn.Module, entries: torch.Tensor, w: torch.Tensor) -> None:
    """Make b1(E) = E w exactly (w: (d_E,)). mlp: gelu(z) - gelu(-z) = z, with two hidden units."""
    if isinstance(module, BroadcastBias):
        module.bias.copy_(entries @ w)
        return
    for p in module.parameters():
        p.zero_()
    if len(module) == 1:
        module[0].weight[0] = w
        return
    if module[0].out_features < 2:
        raise ModformerError("an mlp threshold needs threshold_hidden >= 2 to represent b1 exactly")
    module[0].weight[0], module[0].weight[1] = w, -w
    module[2].weight[0, 0], module[2].weight[0, 1] = 1.0, -1.0


def _layers(entries: torch.Tensor, parts: list[_Parts], coeffs: list[dict[str, torch.Tensor]], threshold: str,
            threshold_hidden: int) -> tuple[KnowledgeBase, list[KnowledgeFFN]]:
    """A base E (n_E, d_E) and layers where layer l has W_<read> = E coeffs[l][read] (coefficients
    (d_E, d)), b_<read> = E coeffs[l]["b_" + read], W_down^T = E coeffs[l]["down"].

    The coefficients go where they cost least: with d_E <= d into W_Q (W_K = I, d_k = d_E);
    with d_E > d (a wide base, as for a pretrained model's d_ff) into W_K = coeffs^T with
    W_Q = sqrt(d_k) I (d_k = d), so that the keys E W_K^T are the FFN's rows themselves and no
    d_E x d_E identity is multiplied through."""
    if threshold == "token":
        raise ModformerError("unfolding writes FFNs as per-entry thresholds; a per-token threshold (token) adds a "
                             "term no FFN has: use mlp, linear or none")
    n_entries, d_entry = entries.shape
    base = _new(lambda: KnowledgeBase(n_entries, d_entry), entries)
    eye = torch.eye(d_entry, dtype=entries.dtype)
    layers = []
    with torch.no_grad():
        base.entries.copy_(entries)
        for p, c in zip(parts, coeffs):
            d = p.W_down.shape[0]
            layer = _new(lambda: KnowledgeFFN(base, d, d_key=key_width(d, d_entry), activation=p.activation,
                                              threshold=threshold, threshold_hidden=threshold_hidden), entries)
            for name in layer.reads:
                read = getattr(layer, name)
                if d_entry <= d:
                    read.k_proj.weight.copy_(eye)
                    read.q_proj.weight.copy_(c[name] / read.scale)  # (E I^T) A_q / sqrt(d_k) = E c
                else:
                    read.k_proj.weight.copy_(c[name].mT)  # (E c) I sqrt(d_k) / sqrt(d_k) = E c
                    read.q_proj.weight.copy_(torch.eye(d, dtype=entries.dtype) / read.scale)
                _set_threshold(read.threshold, entries, c["b_" + name])
            layer.v_proj.weight.copy_(c["down"].mT)
            layer.bias.copy_(p.b_down)
            layers.append(layer)
    return base, layers


def key_width(d_model: int, d_entry: int) -> int:
    """d_k of an unfolded layer: min(d_model, d_E).

    Args:
        d_model: the FFN's model width d.
        d_entry: the base's entry width d_E.

    Returns:
        The query and key width d_k, min(d_model, d_entry).
    """
    return min(d_model, d_entry)


def _check_widths(parts: list[_Parts]) -> int:
    widths = {p.W_down.shape[1] for p in parts}
    if len(widths) != 1:
        raise ModformerError(f"unfolding into one base needs FFNs of one hidden width, got {sorted(widths)}")
    return widths.pop()


def unfold(ffns: list[nn.Module], *, threshold: str = "linear",
           threshold_hidden: int = 2) -> tuple[KnowledgeBase, list[KnowledgeFFN]]:
    """Write FFN layers EXACTLY as knowledge layers over ONE shared base.

    E = I (n_E = d_E = d_ff), keys E W_K^T = W_up with queries sqrt(d_k) H (d_k = d; when
    d_ff <= d, W_K = I and W_Q = sqrt(d_k) W_up) and the gate's alike, W_V = W_down,
    b2 = b_down, and a threshold returning b_up exactly: linear (weights b_up),
    mlp (gelu(b) - gelu(-b) = b; needs threshold_hidden >= 2) or none (the bias itself).
    Conditions: every module has nn.Linear `up_proj` and `down_proj` (and `gate_proj` when
    gated), all of the same hidden width d_ff (biases optional; d_model may differ); the
    activation is relu, exact gelu or silu, or silu-gated (our ReLUFFN, ActivationFFN,
    SwiGLU; Hugging Face LlamaMLP). Built in float64, returned in the first FFN's dtype and
    device; exact up to that dtype's rounding (fold(layer) gives back the weights).

    Args:
        ffns: the FFN modules, one per layer, in layer order; they are read, not changed.
        threshold: the kind of threshold b1(E) of every layer: `linear`, `mlp` or `none`
            (`token` raises `ModformerError`: no FFN has a per-token threshold).
        threshold_hidden: hidden width of an `mlp` threshold (at least 2 to be exact).

    Returns:
        `(base, layers)`: the shared `KnowledgeBase` with E = I (d_ff, d_ff), and one
            `KnowledgeFFN` per FFN, in order, reading that base; each maps (B, T, d_model) to
            (B, T, d_model) as its FFN does.
    """
    parts = [_parts(f) for f in ffns]
    n = _check_widths(parts)
    coeffs = [{**p.weights, **{"b_" + r: b for r, b in p.biases.items()}, "down": p.W_down.mT} for p in parts]
    like = next(ffns[0].parameters())
    base, layers = _layers(torch.eye(n, dtype=torch.float64), parts, coeffs, threshold, threshold_hidden)
    return base.to(like), [layer.to(like) for layer in layers]


def _importance(p: _Parts) -> torch.Tensor:
    """(n,): a bound on each hidden unit's output norm for inputs of RMS 1 (norm sqrt(d))."""
    root_d = math.sqrt(p.W_down.shape[0])
    reach = torch.stack([p.weights[r].norm(dim=1) * root_d + p.biases[r].abs() for r in p.weights]).prod(0)
    return reach * p.W_down.norm(dim=0)


def unfold_approximate(ffns: list[nn.Module], n_entries: int | None = None, d_entry: int | None = None, *,
                       threshold: str = "linear", threshold_hidden: int = 2, n_samples: int = 512,
                       seed: int = 0) -> tuple[KnowledgeBase, list[KnowledgeFFN], list[dict[str, float]]]:
    """Knowledge layers over one SMALLER base (d_E <= n_E <= d_ff), and each layer's error.

    d_E: a joint truncated SVD of the stacked hidden-unit matrices of all layers,
    X = [W_up_l, W_down_l^T, b_up_l (and gate's)] (n_E x L(2d+1) columns), each block scaled
    to unit Frobenius norm so every layer weighs the same, computed from the eigenvectors of
    X X^T (n_E x n_E; X is never formed). E = sqrt(n_E) U_r and the rest of the rank-r factor
    go into the layers (their W_Q or W_K). By Eckart-Young this
    minimises the sum of squared relative errors of all blocks; it is EXACT whenever
    d_E >= rank(X) <= min(n_E, L(2d+1)) (L(3d+2) gated), e.g. one layer with d_ff > 2d + 1.
    It is optimal only for the given order of each layer's hidden units: a unit permutation
    per layer leaves the FFNs unchanged but changes X, and is not searched here.
    n_E < d_ff: each layer keeps its n_E units of largest importance, a bound on each unit's
    output norm for inputs of RMS 1 (magnitude pruning: a heuristic, exact only when the
    dropped units contribute nothing); a nonlinearity acts
    on each entry separately, so no factorization merges entries exactly in general.

    Errors per layer (relative Frobenius, in float64, against the original with pruned
    units counted as zeros): W1 (up and gate), W2 (down), b1, and output on `n_samples`
    standard normal inputs drawn from a generator seeded with `seed`.

    Args:
        ffns: the FFN modules, one per layer, in layer order, under the conditions of `unfold`
            (one hidden width d_ff); they are read, not changed.
        n_entries: entries n_E kept per layer (the units of largest importance); None: d_ff.
        d_entry: the base's entry width d_E, the rank of the factorization; None: n_E.
            Needs 1 <= d_E <= n_E <= d_ff.
        threshold: the kind of threshold b1(E) of every layer: `linear`, `mlp` or `none`.
        threshold_hidden: hidden width of an `mlp` threshold (at least 2 to be exact).
        n_samples: number of random inputs (n_samples, d_model) the output error is measured on.
        seed: seed of the generator drawing those inputs.

    Returns:
        `(base, layers, errors)`: the shared `KnowledgeBase` E (n_E, d_E); one `KnowledgeFFN`
            per FFN, in order, reading it, in the first FFN's dtype and device; and per layer a
            dict of relative errors with keys `W1`, `W2`, `b1` and `output`.
    """
    parts = [_parts(f) for f in ffns]
    n = _check_widths(parts)
    n_entries = n_entries or n
    d_entry = d_entry or n_entries
    if not 1 <= d_entry <= n_entries <= n:
        raise ModformerError(f"need 1 <= d_entry <= n_entries <= d_ff={n}, got d_entry={d_entry}, "
                             f"n_entries={n_entries}")
    keep = [_importance(p).argsort(descending=True)[:n_entries].sort().values if n_entries < n else torch.arange(n)
            for p in parts]
    blocks = []  # (layer, key, (n_E, c) matrix)
    for l, (p, k) in enumerate(zip(parts, keep)):
        blocks += [(l, r, w[k]) for r, w in p.weights.items()] + [(l, "down", p.W_down[:, k].mT)]
        blocks += [(l, "b_" + r, b[k, None]) for r, b in p.biases.items()]
    # The left singular vectors of X are the eigenvectors of X X^T (n_E x n_E), accumulated block
    # by block: X itself (n_E x L(3d+2), 51,900 columns for SmolLM2's 30 layers) is never formed
    # or decomposed. Its top-d_E eigenvectors U span the best shared rank-d_E column space.
    gram = torch.zeros(n_entries, n_entries, dtype=torch.float64)
    for _, _, m in blocks:
        norm = float(m.norm()) or 1.0
        gram.addmm_(m, m.mT, alpha=1.0 / norm ** 2)
    U = torch.linalg.eigh(gram).eigenvectors.flip(1)[:, :d_entry]  # largest eigenvalues first
    entries = U * math.sqrt(n_entries)
    coeffs: list[dict[str, torch.Tensor]] = [{} for _ in parts]
    for l, key, m in blocks:
        c = U.mT @ m / math.sqrt(n_entries)  # entries @ c = U U^T m: m projected on the shared space
        coeffs[l][key] = c[:, 0] if key.startswith("b_") else c
    base, layers = _layers(entries, parts, coeffs, threshold, threshold_hidden)
    errors = [_errors(ffn, p, k, layer, entries, c, n_samples, seed)
              for ffn, p, k, layer, c in zip(ffns, parts, keep, layers, coeffs)]
    like = next(ffns[0].parameters())
    return base.to(like), [layer.to(like) for layer in layers], errors


def _errors(ffn: nn.Module, p: _Parts, keep: torch.Tensor, layer: KnowledgeFFN, entries: torch.Tensor,
            c: dict[str, torch.Tensor], n_samples: int, seed: int) -> dict[str, float]:
    def rel(approx: torch.Tensor, exact: torch.Tensor) -> float:
        diff = float((approx - exact).norm())
        return diff / float(exact.norm()) if exact.norm() > 0 else diff

    def scatter(rows: torch.Tensor, n: int) -> torch.Tensor:  # pruned units as zero rows
        out = rows.new_zeros(n, *rows.shape[1:])
        out[keep] = rows
        return out

    n = p.W_down.shape[1]
    W1 = torch.cat([p.weights[r] for r in p.weights])
    W1_hat = torch.cat([scatter(entries @ c[r], n) for r in p.weights])
    b1 = torch.cat([p.biases[r] for r in p.weights])
    b1_hat = torch.cat([scatter(entries @ c["b_" + r], n) for r in p.weights])
    W2_hat = scatter(entries @ c["down"], n).mT
    x = torch.randn(n_samples, p.W_down.shape[0], dtype=torch.float64,
                    generator=torch.Generator().manual_seed(seed))
    with torch.no_grad():
        out = copy.deepcopy(ffn).double()(x)
        got = layer(x[None])[0]
    return {"W1": rel(W1_hat, W1), "W2": rel(W2_hat, p.W_down), "b1": rel(b1_hat, b1), "output": rel(got, out)}


def fold_model(model: Transformer) -> Transformer:
    """A copy of `model` with every knowledge layer folded into an ordinary FFN and the base
    removed; attention, norms, embeddings and head are copied unchanged. Same logits up to
    rounding. New FFN parameters require grad; see `folded_config` for its config.

    Args:
        model: a model whose knowledge layers read its base `knowledge`; it is not changed.

    Returns:
        The folded copy: a `Transformer` with no `knowledge` submodule, each `KnowledgeFFN`
            replaced by the FFN `fold` gives (other blocks' FFNs copied as they are).
    """
    out = copy.deepcopy(model)
    for block in out.blocks:
        if isinstance(block.ffn, KnowledgeFFN):
            block.ffn = fold(block.ffn)
    if hasattr(out, "knowledge"):
        del out.knowledge
    return out


def unfold_model(model: Transformer, *, threshold: str = "linear", threshold_hidden: int = 2) -> Transformer:
    """A copy of `model` whose FFNs are knowledge layers over one base E = I registered as
    `knowledge` (`unfold`); everything else unchanged. See `unfolded_config` for its config.

    Args:
        model: a model without a knowledge base, whose every block's FFN `unfold` accepts;
            it is not changed.
        threshold: the kind of threshold b1(E) of every layer: `linear`, `mlp` or `none`.
        threshold_hidden: hidden width of an `mlp` threshold (at least 2 to be exact).

    Returns:
        The unfolded copy: a `Transformer` whose block FFNs are `KnowledgeFFN`s over one base
            E = I (d_ff, d_ff), registered as the submodule `knowledge`; same logits up to rounding.
    """
    if hasattr(model, "knowledge"):
        raise ModformerError("the model already has a knowledge base (fold it first)")
    out = copy.deepcopy(model)
    base, layers = unfold([block.ffn for block in out.blocks], threshold=threshold, threshold_hidden=threshold_hidden)
    for block, layer in zip(out.blocks, layers):
        block.ffn = layer
    out.add_module("knowledge", base)
    return out


def unfold_model_approximate(model: Transformer, n_entries: int | None, d_entry: int | None, *,
                             threshold: str = "linear", threshold_hidden: int = 2
                             ) -> tuple[Transformer, list[dict[str, float]]]:
    """`unfold_model` with a smaller base (`unfold_approximate`): the model and each layer's errors.

    Args:
        model: a model without a knowledge base, whose every block's FFN `unfold` accepts;
            it is not changed.
        n_entries: entries n_E kept per layer; None: the FFNs' width d_ff.
        d_entry: the base's entry width d_E; None: n_E.
        threshold: the kind of threshold b1(E) of every layer: `linear`, `mlp` or `none`.
        threshold_hidden: hidden width of an `mlp` threshold (at least 2 to be exact).

    Returns:
        `(model, errors)`: the unfolded copy, its block FFNs `KnowledgeFFN`s over one base
            E (n_E, d_E) registered as `knowledge`; and per layer the dict of relative errors
            (`W1`, `W2`, `b1`, `output`) that `unfold_approximate` returns.
    """
    if hasattr(model, "knowledge"):
        raise ModformerError("the model already has a knowledge base (fold it first)")
    out = copy.deepcopy(model)
    base, layers, errors = unfold_approximate([block.ffn for block in out.blocks], n_entries, d_entry,
                                              threshold=threshold, threshold_hidden=threshold_hidden)
    for block, layer in zip(out.blocks, layers):
        block.ffn = layer
    out.add_module("knowledge", base)
    return out, errors


def folded_config(cfg: ModelConfig) -> ModelConfig:
    """The config of `fold_model`'s result for a knowledge-variant model of config `cfg`.

    Args:
        cfg: the model config of the knowledge-variant model; it is not changed.

    Returns:
        A copy of `cfg` with variant `standard`, `ffn` the knowledge activation, `ffn_bias`
            true, `d_ff` the number of entries n_E, and a default `knowledge` section.
    """
    n_entries, _, _ = cfg.knowledge.sizes(cfg.d_model, cfg.ffn_dim)
    return replace(cfg, variant="standard", ffn=cfg.knowledge.activation, ffn_bias=True, d_ff=n_entries,
                   knowledge=KnowledgeConfig())


def unfolded_config(cfg: ModelConfig, *, threshold: str = "linear", threshold_hidden: int = 2,
                    n_entries: int | None = None, d_entry: int | None = None) -> ModelConfig:
    """The config of `unfold_model`'s result (or `unfold_model_approximate`'s, with the
    smaller sizes) for a model of config `cfg` (ffn relu, gelu, silu or swiglu).

    Args:
        cfg: the model config of the model unfolded; it is not changed.
        threshold: the threshold kind the unfolding used.
        threshold_hidden: the hidden width of an `mlp` threshold the unfolding used.
        n_entries: the number of entries n_E of an approximate unfolding; None: `cfg`'s d_ff.
        d_entry: the entry width d_E of an approximate unfolding; None: n_E.

    Returns:
        A copy of `cfg` with variant `knowledge` and a `knowledge` section of those sizes,
            d_key = min(d_model, d_E) and activation `cfg.ffn`.
    """
    if cfg.ffn not in ("relu", "gelu", "silu", "swiglu"):
        raise ModformerError(f"model.ffn={cfg.ffn} has no knowledge form (relu, gelu, silu or swiglu)")
    n = n_entries or cfg.ffn_dim
    d = d_entry or n
    return replace(cfg, variant="knowledge", knowledge=KnowledgeConfig(
        n_entries=n, d_entry=d, d_key=key_width(cfg.d_model, d), activation=cfg.ffn, threshold=threshold, threshold_hidden=threshold_hidden))
