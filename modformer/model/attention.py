"""Multi-head causal self-attention (the standard mixer)."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from ..registry import MIXERS
from .config import ModelConfig
from .hooks import HookPoint
from .rope import RotaryEmbedding


class SelfAttention(nn.Module):
    """Softmax attention with separate Q, K, V and output projections.

    Q and K are separate modules (`q_proj`, `k_proj`) so that a freeze specification can
    name them; their layout matches Hugging Face Llama, grouped-query heads included.
    Hook points: `pattern` (B, H, T, T) attention weights, computed explicitly only while
    captured; otherwise `scaled_dot_product_attention` runs with its causal flag.
    """

    def __init__(self, d_model: int, n_heads: int, n_kv_heads: int | None = None, *, bias: bool = False,
                 rope: RotaryEmbedding | None = None, causal: bool = True):
        super().__init__()
        self.n_heads = n_heads
        self.n_kv_heads = n_kv_heads or n_heads
        self.head_dim = d_model // n_heads
        self.causal = causal
        self.q_proj = nn.Linear(d_model, n_heads * self.head_dim, bias=bias)
        self.k_proj = nn.Linear(d_model, self.n_kv_heads * self.head_dim, bias=bias)
        self.v_proj = nn.Linear(d_model, self.n_kv_heads * self.head_dim, bias=bias)
        self.o_proj = nn.Linear(n_heads * self.head_dim, d_model, bias=bias)
        self.rope = rope
        self.pattern = HookPoint()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: (B, T, d_model) -> (B, T, d_model)."""
        B, T, _ = x.shape
        q = self.q_proj(x).view(B, T, self.n_heads, self.head_dim).transpose(1, 2)  # (B, H, T, hd)
        k = self.k_proj(x).view(B, T, self.n_kv_heads, self.head_dim).transpose(1, 2)  # (B, Hkv, T, hd)
        v = self.v_proj(x).view(B, T, self.n_kv_heads, self.head_dim).transpose(1, 2)
        if self.rope is not None:
            q, k = self.rope(q), self.rope(k)
        if self.pattern.active:
            y = self._explicit(q, k, v)
        else:
            y = F.scaled_dot_product_attention(
                q, k, v, is_causal=self.causal, enable_gqa=self.n_kv_heads != self.n_heads)
        return self.o_proj(y.transpose(1, 2).reshape(B, T, -1))

    def _explicit(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """The same attention with the weights materialised, for analysis."""
        repeat = self.n_heads // self.n_kv_heads
        k, v = k.repeat_interleave(repeat, dim=1), v.repeat_interleave(repeat, dim=1)
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.head_dim)  # (B, H, T, T)
        if self.causal:
            T = q.shape[-2]
            future = torch.ones(T, T, dtype=torch.bool, device=q.device).triu(1)
            scores = scores.masked_fill(future, float("-inf"))
        weights = self.pattern(scores.softmax(dim=-1))
        return weights @ v


@MIXERS.register("attention")
def build_attention(cfg: ModelConfig) -> SelfAttention:
    rope = RotaryEmbedding(cfg.head_dim, cfg.max_seq_len, cfg.rope_theta) if cfg.rope else None
    return SelfAttention(cfg.d_model, cfg.n_heads, cfg.n_kv_heads, bias=cfg.attn_bias, rope=rope)
