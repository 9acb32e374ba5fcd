"""MixiT's mixer: a fixed, input-independent random mixing matrix in place of attention.

Per layer and head h, with sequence length T and head width d_h (arXiv 2506.01115):

    sigma_h ~ U[1/sqrt(T d_h), 1/sqrt(T)]     # T: the model's length (+ extra_positions)
    N       ~ Normal(0, sigma_h^2), T x T, lower triangle kept (causal)
    drift_i = (sum_j N_ij) / (i + 1)          # bidirectional, row_sum: / T
    A       = tril(I + c (N - drift))         # bidirectional: no tril

so every causal row of A sums to exactly 1. Bidirectional rows sum to 1 with the corrected
drift (`bidirectional_drift: row_sum`); the reference keeps the i + 1 there
(`bidirectional_drift: reference`), so row i sums to 1 + c S_i (1 - T / (i + 1)) with
S_i = sum_j N_ij, and its early rows subtract S_i / (i + 1) from every one of the T tokens. The output is A V, then the output projection; there
are no Q or K projections, scores or softmax. A is a persistent buffer: checkpoints carry
it, and a loaded model mixes exactly as the saved one (the reference code redraws it from
the RNG and does not save it).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import torch
from torch import nn

from ..configtools import option
from ..registry import MIXERS
from .cache import LayerCache
from .config import ModelConfig
from .hooks import HookPoint


@dataclass
class MixingOptions:
    """Options of the `mixing` mixer (MixiT; `model.mixer_options`, or a layer's own in `model.layers`)."""

    scale: float = option(1.0, "c in A = tril(I + c (N - drift)): how far the mixing departs from the identity")
    sigma_range: tuple[float, float] | None = option(
        None, "range of each head's noise std sigma_h (drawn uniformly); null: [1/sqrt(T d_h), 1/sqrt(T)]")
    sink_head: bool = option(False, "overwrite head 0 with the reference's sink pattern: 0.5 on token 0 and 0.5 on "
                                    "itself, token 0's own row being 0.5 (so it sums to 0.5, every later row to 1)")
    causal: bool = option(True, "causal (lower-triangular) mixing; false: bidirectional (see bidirectional_drift)")
    bidirectional_drift: Literal["row_sum", "reference"] = option(
        "row_sum", "how a bidirectional row's drift is normalised: row_sum divides row i's noise sum by T, so every "
                   "row sums to 1 (ours, corrected); reference divides by i+1 as the reference code does, so early "
                   "rows do not sum to 1 and pool many tokens. Causal mixing divides by i+1 either way")
    extra_positions: int = option(
        0, "draw A for this many positions beyond the model's length and keep its top-left block (causal only): "
           "T in sigma_h's range counts them. The reference draws A for its whole sample, answer included, one "
           "position more than our input in its own algorithmic tasks")

    def __post_init__(self) -> None:
        if self.extra_positions < 0 or self.extra_positions and not self.causal:
            raise ValueError(f"extra_positions must be >= 0, and 0 for bidirectional mixing (drawn for exactly its "
                             f"length), got {self.extra_positions} with causal={self.causal}")
        if self.sigma_range is not None and not 0 <= self.sigma_range[0] <= self.sigma_range[1]:
            raise ValueError(f"sigma_range must be [low, high] with 0 <= low <= high, got {list(self.sigma_range)}")


def mixing_matrices(n_heads: int, T: int, head_dim: int, cfg: MixingOptions,
                    generator: torch.Generator) -> torch.Tensor:
    """Draw A, (n_heads, T, T) float32, in float64 so row sums are 1 to rounding."""
    low, high = cfg.sigma_range or (1.0 / math.sqrt(T * head_dim), 1.0 / math.sqrt(T))
    sigma = low + (high - low) * torch.rand(n_heads, 1, 1, generator=generator, dtype=torch.float64)
    noise = torch.randn(n_heads, T, T, generator=generator, dtype=torch.float64) * sigma
    eye = torch.eye(T, dtype=torch.float64)
    if cfg.causal:
        noise = noise.tril()
        drift = noise.sum(-1, keepdim=True) / torch.arange(1, T + 1, dtype=torch.float64).view(T, 1)
        mix = (eye + cfg.scale * (noise - drift)).tril()
    else:
        rows = torch.arange(1, T + 1, dtype=torch.float64).view(T, 1) if cfg.bidirectional_drift == "reference" else T
        drift = noise.sum(-1, keepdim=True) / rows
        mix = eye + cfg.scale * (noise - drift)
    if cfg.sink_head:
        # The reference's order (modeling_llama.py, LlamaAttention): 0.5 * I, then column 0 set
        # to 0.5, so [0, 0] is 0.5, not 1: token 0's row sums to 0.5, every later row to 1.
        sink = 0.5 * eye
        sink[:, 0] = 0.5
        mix[0] = sink
    return mix.float()


class MixingMixer(nn.Module):
    """y = o_proj(A v_proj(x)) with A fixed (a buffer, never trained).

    Causal A may mix shorter sequences than it was drawn for: its top-left block still has
    rows summing to 1. Bidirectional A only fits sequences of exactly its length.
    Hook point `pattern`: A broadcast to (B, H, T, T), the same shape as attention weights.
    """

    def __init__(self, d_model: int, n_heads: int, max_seq_len: int, cfg: MixingOptions, *, bias: bool = False):
        super().__init__()
        self.n_heads = n_heads
        self.head_dim = d_model // n_heads
        self.cfg = cfg
        self.v_proj = nn.Linear(d_model, d_model, bias=bias)
        self.o_proj = nn.Linear(d_model, d_model, bias=bias)
        # Drawn by `init_parameters` from the model's seed; zeros until then.
        self.register_buffer("mixing", torch.zeros(n_heads, max_seq_len, max_seq_len))
        self.pattern = HookPoint()

    @property
    def causal(self) -> bool:  # read by the probe (modformer/model/probe.py)
        return self.cfg.causal

    def init_parameters(self, std: float, generator: torch.Generator) -> None:
        with torch.no_grad():
            for proj in (self.v_proj, self.o_proj):
                proj.weight.normal_(0.0, std, generator=generator)
                if proj.bias is not None:
                    proj.bias.zero_()
            T = self.mixing.shape[-1]
            # A causal matrix's top-left block is what a longer one mixes the first T tokens with.
            drawn = mixing_matrices(self.n_heads, T + self.cfg.extra_positions, self.head_dim, self.cfg, generator)
            self.mixing.copy_(drawn[:, :T, :T])

    def forward(self, x: torch.Tensor, cache: LayerCache | None = None) -> torch.Tensor:
        """x: (B, T, d_model) -> (B, T, d_model). With `cache`, x holds the tokens after the
        cache's `offset` earlier ones, whose values it holds (and gains these)."""
        B, T, _ = x.shape
        offset = 0 if cache is None else cache.offset
        if not self.cfg.causal and (T != self.mixing.shape[-1] or cache is not None):
            raise ValueError(f"bidirectional mixing was drawn for whole sequences of length {self.mixing.shape[-1]}, "
                             f"got {T} tokens{' after a cache' if cache is not None else ''}")
        if offset + T > self.mixing.shape[-1]:
            raise ValueError(f"sequence length {offset + T} exceeds model.max_seq_len={self.mixing.shape[-1]}")
        mix = self.mixing[:, offset:offset + T, :offset + T].to(x.dtype)  # (H, T, offset + T): rows of these positions
        v = self.v_proj(x).view(B, T, self.n_heads, self.head_dim).transpose(1, 2)  # (B, H, T, hd)
        if cache is not None:
            v = cache.extend("v", v)
        if self.pattern.active:  # a hook sees (and may edit) a pattern per sequence, as attention weights are
            mixed = (self.pattern(mix.expand(B, -1, -1, -1)) @ v).transpose(1, 2)
        else:
            mixed = mix_values(mix, v)
        return self.o_proj(mixed.reshape(B, T, -1))


def mix_values(mix: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """mix (H, T, S), v (B, H, S, hd) -> (B, T, H, hd): out[b, t, h] = sum_s mix[h, t, s] v[b, h, s].

    One product per head over the batch's values side by side. The broadcast `mix @ v` would
    copy mix once per sequence, (B x H, T, S), and keep that copy for backward: more memory
    than attention's weights at long lengths."""
    B, H, S, hd = v.shape
    out = torch.bmm(mix, v.permute(1, 2, 0, 3).reshape(H, S, B * hd))  # (H, T, B * hd)
    return out.view(H, -1, B, hd).permute(2, 1, 0, 3)


@MIXERS.register("mixing")
def build_mixing(cfg: ModelConfig, options: MixingOptions) -> MixingMixer:
    return MixingMixer(cfg.d_model, cfg.n_heads, cfg.max_seq_len, options, bias=cfg.attn_bias)


build_mixing.Options = MixingOptions
