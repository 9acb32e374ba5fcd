"""Knowledge as cross-attention over one base shared by every layer (arXiv 2501.00823).

A `KnowledgeBase` E holds n_E entries of width d_E. Each block's feed-forward slot holds a
`KnowledgeFFN` that reads it, with H the block's (normed) input:

    S   = act( (H W_Q) (E W_K)^T / sqrt(d_k) + b1(E) )     # (B, T, n_E), hook point `scores`
    out = S (E W_V) + b2                                    # (B, T, d)

b1(E) in R^{n_E} is a per-entry threshold computed from E by a small per-layer network and
broadcast over tokens (the paper's N x n_E form cannot fold into an FFN). With E fixed this
is exactly an FFN (see `modformer.knowledge.fold`). The gated form (`swiglu`) has separate
queries, keys and thresholds for gate and up: S = silu(gate scores) * (up scores).

E is registered once, on the model (`knowledge.entries`); the layers reach it through a
reference that is not a submodule, so state dicts, checkpoints and optimizers see one
tensor, and `.to()`, `.double()` and `load_state_dict` (also with `assign=True`) keep every
layer reading the model's E. A layer used on its own must be moved together with its base.
This module does not import `config.py` (which imports `KnowledgeConfig` from here).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal, get_args

import torch
import torch.nn.functional as F
from torch import nn

from ..configtools import option
from ..errors import ConfigError
from .hooks import HookPoint

# act(*pre-activation scores) -> S; the gated form takes (gate, up), in `_READS` order.
_ACTIVATIONS = {
    "relu": F.relu,
    "gelu": F.gelu,
    "silu": F.silu,
    "swiglu": lambda gate, up: F.silu(gate) * up,
}
_READS = {"relu": ("up",), "gelu": ("up",), "silu": ("up",), "swiglu": ("gate", "up")}
Activation = Literal["relu", "gelu", "silu", "swiglu"]  # the keys of _ACTIVATIONS
Threshold = Literal["mlp", "linear", "none", "token"]
THRESHOLDS = get_args(Threshold)


@dataclass
class KnowledgeConfig:
    """The `model.knowledge` section: the shared base and the knowledge layers that read it."""

    n_entries: int | None = option(None, "entries n_E in the shared knowledge base E; null: the feed-forward "
                                         "width (model.d_ff), so that E indexes as many units as an FFN has")
    d_entry: int | None = option(None, "width d_E of each entry; null: model.d_model")
    d_key: int | None = option(None, "width d_k of queries and keys; null: d_entry")
    activation: Activation = option("relu", "act on the scores: relu (the paper's), gelu, silu, or swiglu "
                                     "(silu(gate scores) * up scores, the gated form of Llama's MLP)")
    threshold: Threshold = option("mlp", "per-entry threshold b1(E): mlp (Linear-GELU-Linear on each entry), linear "
                                   "(one Linear on each entry), none (a learned bias per entry, not a function of E), "
                                   "or token (the paper's N x n_E form: a bias per entry plus Linear-GELU-Linear of "
                                   "each token's H; it depends on the token, so the layer cannot fold into an FFN)")
    threshold_hidden: int = option(16, "hidden width of the mlp and token threshold networks")
    groups: list[list[int]] | None = option(
        None, "layers that share a base, one base per group, e.g. [[0, 1], [2, 3]] (parameters knowledge.0.entries, "
              "knowledge.1.entries); every layer in exactly one group. null: one base for all (knowledge.entries)")

    def __post_init__(self) -> None:
        for key in ("n_entries", "d_entry", "d_key"):
            value = getattr(self, key)
            if value is not None and value < 1:
                raise ConfigError(f"model.knowledge.{key} must be positive or null, got {value}")
        if self.threshold_hidden < 1:
            raise ConfigError(f"model.knowledge.threshold_hidden must be positive, got {self.threshold_hidden}")

    def check_groups(self, n_layers: int) -> None:
        if self.groups is None:
            return
        flat = [i for group in self.groups for i in group]
        if not self.groups or any(not group for group in self.groups) or sorted(flat) != list(range(n_layers)):
            raise ConfigError(f"model.knowledge.groups must put each of the {n_layers} layers (0..{n_layers - 1}) "
                              f"in exactly one non-empty group, got {self.groups}")

    def sizes(self, d_model: int, d_ff: int) -> tuple[int, int, int]:
        """(n_E, d_E, d_k) with the nulls resolved against the model's widths.

        Args:
            d_model: the model width d, the default of d_E.
            d_ff: the feed-forward width, the default of n_E.

        Returns:
            `(n_entries, d_entry, d_key)`: n_E (else d_ff), d_E (else d_model), d_k (else d_E).
        """
        d_entry = self.d_entry or d_model
        return self.n_entries or d_ff, d_entry, self.d_key or d_entry


class KnowledgeBase(nn.Module):
    """E: one parameter `entries`, (n_E, d_E). Register it once, on the model.

    Args:
        n_entries: the number of entries n_E.
        d_entry: the width d_E of each entry.
    """

    def __init__(self, n_entries: int, d_entry: int):
        super().__init__()
        # Zeros, not a random draw: `init_parameters` sets the values from a seeded generator.
        self.entries = nn.Parameter(torch.zeros(n_entries, d_entry))

    @property
    def n_entries(self) -> int:
        return self.entries.shape[0]

    @property
    def d_entry(self) -> int:
        return self.entries.shape[1]

    def init_parameters(self, std: float, generator: torch.Generator) -> None:
        # Unit-scale entries (std ignored): W_K and W_V then read E as the other linear layers
        # read RMS-normed hidden states, and E W_K starts at the scale of H W_Q.
        with torch.no_grad():
            self.entries.normal_(0.0, 1.0, generator=generator)

    def extra_repr(self) -> str:
        return f"n_entries={self.n_entries}, d_entry={self.d_entry}"


class EntryThreshold(nn.Sequential):
    """b1(E): a small network applied to each entry, (n_E, d_E) -> (n_E,)."""

    def forward(self, entries: torch.Tensor) -> torch.Tensor:
        return super().forward(entries).squeeze(-1)


class BroadcastBias(nn.Module):
    """b1 as a plain learned bias per entry (`threshold=none`), ignoring E: the baseline that
    the paper's E-dependent threshold is compared against. (n_E, d_E) -> (n_E,).

    Args:
        n_entries: the number of entries n_E, one bias each (zeros at first).
    """

    def __init__(self, n_entries: int):
        super().__init__()
        self.bias = nn.Parameter(torch.zeros(n_entries))

    def forward(self, entries: torch.Tensor) -> torch.Tensor:
        return self.bias


def make_threshold(kind: str, n_entries: int, d_entry: int, hidden: int) -> nn.Module:
    """A threshold module of kind mlp, linear or none, mapping E (n_E, d_E) to b1 (n_E,).

    Args:
        kind: `mlp` (Linear-GELU-Linear on each entry), `linear` (one Linear on each entry),
            `none` or `token` (a learned bias per entry; `TokenThresholdRead` adds the
            per-token part of `token`).
        n_entries: the number of entries n_E (the size of a plain bias).
        d_entry: the width d_E of each entry (the input width of mlp and linear).
        hidden: the hidden width of `mlp`.

    Returns:
        The module, mapping entries (n_E, d_E) to thresholds (n_E,).
    """
    if kind == "mlp":
        return EntryThreshold(nn.Linear(d_entry, hidden), nn.GELU(), nn.Linear(hidden, 1))
    if kind == "linear":
        return EntryThreshold(nn.Linear(d_entry, 1))
    if kind in ("none", "token"):  # token: TokenThresholdRead adds the per-token part
        return BroadcastBias(n_entries)
    raise ValueError(f"threshold must be one of {THRESHOLDS}, got {kind!r}")


class KnowledgeRead(nn.Module):
    """One read's pre-activation scores: (H W_Q) (E W_K)^T / sqrt(d_k) + b1(E).

    Args:
        d_model: the width d of the hidden states H (the input of W_Q).
        n_entries: the number of entries n_E of the base read.
        d_entry: the width d_E of the entries (the input of W_K).
        d_key: the width d_k of queries and keys.
        threshold: the kind of threshold b1(E) (`make_threshold`): mlp, linear, none or token.
        threshold_hidden: the hidden width of an mlp threshold.
    """

    def __init__(self, d_model: int, n_entries: int, d_entry: int, d_key: int, threshold: str, threshold_hidden: int):
        super().__init__()
        self.q_proj = nn.Linear(d_model, d_key, bias=False)
        self.k_proj = nn.Linear(d_entry, d_key, bias=False)
        self.threshold = make_threshold(threshold, n_entries, d_entry, threshold_hidden)
        self.scale = 1.0 / math.sqrt(d_key)

    def forward(self, h: torch.Tensor, entries: torch.Tensor) -> torch.Tensor:
        """h (B, T, d_model), entries (n_E, d_E) -> (B, T, n_E).

        Args:
            h: the (normed) hidden states H, (B, T, d_model).
            entries: the base's entries E, (n_E, d_E).

        Returns:
            The pre-activation scores, (B, T, n_E).
        """
        tokens = h.numel() // h.shape[-1]
        (n_entries, d_entry), d_key = entries.shape, self.k_proj.out_features
        if tokens < n_entries and tokens * (d_key * d_entry + d_entry * n_entries) < n_entries * d_entry * d_key \
                + tokens * d_key * n_entries:
            # Few tokens and a wide base (a pretrained model's, d_E ~ n_E ~ 1,500): multiplying each
            # query by W_K, then by E^T, costs T (d_k d_E + d_E n_E) instead of the n_E d_E d_k of
            # forming the keys, which would dominate (an edit or generation step reads ~10-100 tokens).
            q = self.q_proj(h) * self.scale
            return F.linear(F.linear(q, self.k_proj.weight.mT), entries, self.threshold(entries))
        # Keys and thresholds depend on E alone: computed once per call, shared by all tokens.
        keys = self.k_proj(entries) * self.scale
        if tokens >= n_entries:
            # At least n_E tokens: fold W_Q into the keys once per call (n_E x d_k x d) so that each
            # token costs one product, as in an FFN, instead of two (q_proj, then the keys).
            return F.linear(h, keys @ self.q_proj.weight, self.threshold(entries))
        return F.linear(self.q_proj(h), keys, self.threshold(entries))


class TokenThresholdRead(KnowledgeRead):
    """A read whose threshold also depends on the token (the paper's N x n_E threshold):
    b1[t, j] = bias_j + g(h_t)_j with g = Linear-GELU-Linear (d_model -> hidden -> n_E).
    With E fixed this is no longer an FFN of width n_E: it is the comparison baseline for
    the foldable per-entry thresholds, and `fold` refuses it.

    Args:
        d_model: the width d of the hidden states H (the input of W_Q and of g).
        n_entries: the number of entries n_E of the base read.
        d_entry: the width d_E of the entries (the input of W_K).
        d_key: the width d_k of queries and keys.
        threshold: the kind of the per-entry part (`make_threshold`); `token` gives bias_j.
        threshold_hidden: the hidden width of g (and of an mlp per-entry part).
    """

    def __init__(self, d_model: int, n_entries: int, d_entry: int, d_key: int, threshold: str, threshold_hidden: int):
        super().__init__(d_model, n_entries, d_entry, d_key, threshold, threshold_hidden)
        self.token_threshold = nn.Sequential(nn.Linear(d_model, threshold_hidden), nn.GELU(),
                                             nn.Linear(threshold_hidden, n_entries))

    def forward(self, h: torch.Tensor, entries: torch.Tensor) -> torch.Tensor:
        """h (B, T, d_model), entries (n_E, d_E) -> (B, T, n_E).

        Args:
            h: the (normed) hidden states H, (B, T, d_model).
            entries: the base's entries E, (n_E, d_E).

        Returns:
            The pre-activation scores, (B, T, n_E).
        """
        return super().forward(h, entries) + self.token_threshold(h)


_READ_CLASSES = {"token": TokenThresholdRead}


class KnowledgeFFN(nn.Module):
    """A block's feed-forward slot as a read of the shared base: (B, T, d) -> (B, T, d).

    Parameters: `up.{q_proj,k_proj,threshold}` (and `gate.*` for swiglu), `v_proj` (W_V,
    d_E -> d) and `bias` (b2). The base is `self.base`, not a submodule.

    Args:
        base: the shared knowledge base E (n_E, d_E) this layer reads; kept as a reference,
            not registered as a submodule.
        d_model: the model width d.
        d_key: the width d_k of queries and keys; None: d_E.
        activation: act on the scores: relu, gelu, silu, or swiglu (separate gate and up reads).
        threshold: the kind of threshold b1 (`make_threshold`): mlp, linear, none or token.
        threshold_hidden: the hidden width of an mlp or token threshold network.
    """

    def __init__(self, base: KnowledgeBase, d_model: int, *, d_key: int | None = None, activation: str = "relu",
                 threshold: str = "mlp", threshold_hidden: int = 16):
        super().__init__()
        if activation not in _ACTIVATIONS:
            raise ValueError(f"activation must be one of {tuple(_ACTIVATIONS)}, got {activation!r}")
        n_entries, d_entry = base.entries.shape
        self._base = (base,)  # a tuple hides it from nn.Module: E is registered only on the model
        self.activation = activation
        self.reads = _READS[activation]
        read_class = _READ_CLASSES.get(threshold, KnowledgeRead)
        for name in self.reads:
            self.add_module(name, read_class(d_model, n_entries, d_entry, d_key or d_entry, threshold,
                                                threshold_hidden))
        self.v_proj = nn.Linear(d_entry, d_model, bias=False)
        self.bias = nn.Parameter(torch.zeros(d_model))
        self.scores = HookPoint()

    @property
    def base(self) -> KnowledgeBase:
        return self._base[0]

    def attach(self, base: KnowledgeBase) -> None:
        """Read `base` from now on (of the same shape as the current one).

        Args:
            base: the new base; its entries must have the shape (n_E, d_E) of the current one,
                else `ValueError`.
        """
        if base.entries.shape != self.base.entries.shape:
            raise ValueError(f"base of shape {tuple(base.entries.shape)} replaces one of "
                             f"{tuple(self.base.entries.shape)}")
        self._base = (base,)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        """h: (B, T, d_model) -> (B, T, d_model).

        Args:
            h: the block's normed hidden states H, (B, T, d_model).

        Returns:
            S (E W_V) + b2, (B, T, d_model), with S = act(scores) (B, T, n_E) passed through the
                hook point `scores`.
        """
        entries = self.base.entries  # read at call time, so a reloaded or moved E is seen
        s = self.scores(_ACTIVATIONS[self.activation](*(getattr(self, r)(h, entries) for r in self.reads)))
        tokens, (n_entries, d_entry), d = s.numel() // s.shape[-1], entries.shape, self.bias.shape[0]
        if tokens * (n_entries * d_entry + d_entry * d) < d * d_entry * n_entries + tokens * n_entries * d:
            # Few tokens: (S E) W_V^T costs T (n_E d_E + d_E d), forming W_down costs d d_E n_E.
            return F.linear(s @ entries, self.v_proj.weight, self.bias)
        # W_down = W_V E^T, (d, n_E), made contiguous as an FFN's down projection is: a transposed
        # view here costs a copy of the (tokens, n_E) scores in the backward pass.
        return F.linear(s, F.linear(self.v_proj.weight, entries), self.bias)

    def extra_repr(self) -> str:
        n_entries, d_entry = self.base.entries.shape
        return f"activation={self.activation}, n_entries={n_entries}, d_entry={d_entry} (shared base, not a submodule)"
