"""Multi-head self-attention (the standard mixer): causal by default, bidirectional with
`model.mixer_options.causal=false`; its options are `AttentionOptions`."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from ..configtools import option
from ..registry import MIXERS
from .cache import LayerCache
from .config import ModelConfig
from .hooks import HookPoint
from .rope import RotaryEmbedding


@dataclass
class AttentionOptions:
    """Options of the `attention` mixer (`model.mixer_options`, or a layer's own in `model.layers`)."""

    causal: bool = option(True, "causal mask (a decoder); false: every position attends to every other, as the "
                                "random-attention paper's bidirectional classifier does (no key-value cache then)")
    qk_init_scale: float = option(
        1.0, "factor on the init std of the query and key projections: the spread of the initial scores "
             "q.k/sqrt(d_h) grows with width, and Frozen-QK keeps them, so this gives a narrow model a wide one's")

    def __post_init__(self) -> None:
        if not self.qk_init_scale > 0:
            raise ValueError(f"qk_init_scale must be positive, got {self.qk_init_scale}")


class SelfAttention(nn.Module):
    """Softmax attention with separate Q, K, V and output projections.

    Q and K are separate modules (`q_proj`, `k_proj`) so that a freeze specification can
    name them; their layout matches Hugging Face Llama, grouped-query heads included.
    Hook points: `pattern` (B, H, T, T) attention weights, computed explicitly only while
    captured; otherwise `scaled_dot_product_attention` runs with its causal flag.
    """

    def __init__(self, d_model: int, n_heads: int, n_kv_heads: int | None = None, *, bias: bool = False,
                 rope: RotaryEmbedding | None = None, causal: bool = True,
                 qk_init_scale: float = 1.0):
        super().__init__()

        self.n_heads = n_heads
        self.n_kv_heads = n_kv_heads or n_heads
        self.head_dim = d_model // n_heads
        self.causal = causal
        # Q and K stay plain: a scale on them would scale the attention logits (no reference model does).
        self.q_proj = nn.Linear(d_model, n_heads * self.head_dim, bias=bias)
        self.k_proj = nn.Linear(d_model, self.n_kv_heads * self.head_dim, bias=bias)
        for proj in (self.q_proj, self.k_proj):  # read by init_weights: the frozen scores' spread
            proj.init_std_scale = qk_init_scale
        self.v_proj = nn.Linear(d_model, self.n_kv_heads * self.head_dim, bias=bias)
        self.o_proj = nn.Linear(n_heads * self.head_dim, d_model, bias=bias)
        self.rope = rope
        self.pattern = HookPoint()

    def forward(self, x: torch.Tensor, cache: LayerCache | None = None) -> torch.Tensor:
        """x: (B, T, d_model) -> (B, T, d_model). With `cache`, x holds the tokens after the
        cache's `offset` earlier ones, whose keys and values it holds (and gains these)."""
        B, T, _ = x.shape
        offset = 0 if cache is None else cache.offset
        q = self.q_proj(x).view(B, T, self.n_heads, self.head_dim).transpose(1, 2)  # (B, H, T, hd)
        k = self.k_proj(x).view(B, T, self.n_kv_heads, self.head_dim).transpose(1, 2)  # (B, Hkv, T, hd)
        v = self.v_proj(x).view(B, T, self.n_kv_heads, self.head_dim).transpose(1, 2)
        if self.rope is not None:
            q, k = self.rope(q, offset), self.rope(k, offset)
        if cache is not None:
            if not self.causal:
                raise ValueError("bidirectional attention cannot extend a cache: later tokens change earlier outputs")
            k, v = cache.extend("k", k), cache.extend("v", v)  # (B, Hkv, offset + T, hd)
        # Query i sits at position offset + i and sees keys 0..offset + i. Without a prefix that is
        # the usual causal mask; a single new token sees everything.
        mask = None
        if self.causal and offset and T > 1:
            mask = torch.ones(T, offset + T, dtype=torch.bool, device=x.device).tril(offset)
        if self.pattern.active:
            y = self._explicit(q, k, v, offset)
        else:
            y = F.scaled_dot_product_attention(
                q, k, v, attn_mask=mask, is_causal=self.causal and not offset,
                enable_gqa=self.n_kv_heads != self.n_heads)
        return self.o_proj(y.transpose(1, 2).reshape(B, T, -1))

    def _explicit(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, offset: int = 0) -> torch.Tensor:
        """The same attention with the weights materialised, for analysis."""
        repeat = self.n_heads // self.n_kv_heads
        k, v = k.repeat_interleave(repeat, dim=1), v.repeat_interleave(repeat, dim=1)
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.head_dim)  # (B, H, T, offset + T)
        if self.causal:
            T = q.shape[-2]
            future = torch.ones(T, offset + T, dtype=torch.bool, device=q.device).triu(offset + 1)
            scores = scores.masked_fill(future, float("-inf"))
        weights = self.pattern(scores.softmax(dim=-1))
        return weights @ v


@MIXERS.register("attention")
def build_attention(cfg: ModelConfig, options: AttentionOptions) -> SelfAttention:
    rope = RotaryEmbedding(cfg.head_dim, cfg.max_seq_len, cfg.rope_theta) if cfg.rope else None
    return SelfAttention(cfg.d_model, cfg.n_heads, cfg.n_kv_heads, bias=cfg.attn_bias, rope=rope,
                         causal=options.causal, qk_init_scale=options.qk_init_scale)


build_attention.Options = AttentionOptions
