"""Rotary position embedding, in the "rotate half" layout of Hugging Face Llama.

That layout pairs channel i with channel i + d/2 (not 2i with 2i+1), so Llama weights copy
across without permuting the Q and K projections. The angles are computed in float32 as
Hugging Face computes them: at long positions a more exact float64 table would differ from
the one a converted model was trained with by up to about 1e-3.
"""

from __future__ import annotations

import functools

import torch
from torch import nn


@functools.lru_cache(maxsize=8)
def rope_tables(head_dim: int, max_seq_len: int, theta: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(cos, sin), each (max_seq_len, head_dim) float32; shared by every layer that asks."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim))
    angles = torch.outer(torch.arange(max_seq_len, dtype=torch.int64).float(), inv_freq)
    angles = torch.cat([angles, angles], dim=-1)
    return angles.cos(), angles.sin()


class RotaryEmbedding(nn.Module):
    def __init__(self, head_dim: int, max_seq_len: int, theta: float = 10000.0):
        super().__init__()
        cos, sin = rope_tables(head_dim, max_seq_len, float(theta))
        # Tables are derived from the config, so they are not saved in checkpoints.
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)

    def forward(self, x: torch.Tensor, offset: int = 0) -> torch.Tensor:
        """x: (B, H, T, head_dim) -> same shape, rotated by position offset..offset+T-1."""
        end = offset + x.shape[-2]
        if end > self.cos.shape[0]:
            raise ValueError(f"sequence length {end} exceeds model.max_seq_len={self.cos.shape[0]}")
        cos, sin = self.cos[offset:end].to(x.dtype), self.sin[offset:end].to(x.dtype)
        x1, x2 = x.chunk(2, dim=-1)
        return x * cos + torch.cat([-x2, x1], dim=-1) * sin
