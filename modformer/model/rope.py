"""Rotary position embedding, in the "rotate half" layout of Hugging Face Llama.

That layout pairs channel i with channel i + d/2 (not 2i with 2i+1), so Llama weights copy
across without permuting the Q and K projections.
"""

from __future__ import annotations

import torch
from torch import nn


class RotaryEmbedding(nn.Module):
    def __init__(self, head_dim: int, max_seq_len: int, theta: float = 10000.0):
        super().__init__()
        inv_freq = 1.0 / theta ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
        angles = torch.outer(torch.arange(max_seq_len, dtype=torch.float64), inv_freq)
        angles = torch.cat([angles, angles], dim=-1)  # (max_seq_len, head_dim)
        # Tables are derived from the config, so they are not saved in checkpoints.
        self.register_buffer("cos", angles.cos().float(), persistent=False)
        self.register_buffer("sin", angles.sin().float(), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: (B, H, T, head_dim) -> same shape, rotated by position 0..T-1."""
        T = x.shape[-2]
        if T > self.cos.shape[0]:
            raise ValueError(f"sequence length {T} exceeds model.max_seq_len={self.cos.shape[0]}")
        cos, sin = self.cos[:T].to(x.dtype), self.sin[:T].to(x.dtype)
        x1, x2 = x.chunk(2, dim=-1)
        return x * cos + torch.cat([-x2, x1], dim=-1) * sin
