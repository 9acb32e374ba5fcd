"""A pre-norm residual block that is handed its sequence mixer and its feed-forward module."""

from __future__ import annotations

import torch
from torch import nn

from .cache import LayerCache
from .hooks import HookPoint


class Block(nn.Module):
    """skip * x + residual * mixer(norm(x)), then the same with ffn(norm(x)).

    The block knows nothing about what its parts are: attention, a fixed mixing matrix, an
    FFN or a knowledge read are all just modules mapping (B, T, d) to (B, T, d).
    `residual_scale` multiplies each branch and `skip_scale` each skip connection (both 1 by
    default; the MixiT reference uses sqrt(0.5) for both, so a branch and the stream it joins
    keep a total variance of 1 when they are independent with unit variance).
    Hook points: `resid_mid` after the mixer branch, `resid_post` after the whole block.

    Args:
        d_model: the model width d (of the two RMSNorms).
        mixer: the sequence mixer, (B, T, d) -> (B, T, d); it may take `forward(x, cache)`.
        ffn: the feed-forward module, (B, T, d) -> (B, T, d).
        norm_eps: epsilon of the two RMSNorms.
        residual_scale: factor on each branch's output.
        skip_scale: factor on each skip connection.
    """

    def __init__(self, d_model: int, mixer: nn.Module, ffn: nn.Module, *, norm_eps: float = 1e-5,
                 residual_scale: float = 1.0, skip_scale: float = 1.0):
        super().__init__()
        self.mixer_norm = nn.RMSNorm(d_model, eps=norm_eps)
        self.mixer = mixer
        self.ffn_norm = nn.RMSNorm(d_model, eps=norm_eps)
        self.ffn = ffn
        self.residual_scale = residual_scale
        self.skip_scale = skip_scale
        self.resid_mid = HookPoint()
        self.resid_post = HookPoint()

    def forward(self, x: torch.Tensor, cache: LayerCache | None = None) -> torch.Tensor:
        """x: (B, T, d_model) -> (B, T, d_model). `cache` goes to the mixer, the only part that
        looks across positions.

        Args:
            x: the residual stream, (B, T, d_model).
            cache: this layer's key-value cache for cached generation, passed to the mixer as
                `mixer(norm(x), cache)`; None: the mixer is called without it.

        Returns:
            The block's output, (B, T, d_model), also passed through `resid_post`.
        """
        mixed = self.mixer(self.mixer_norm(x)) if cache is None else self.mixer(self.mixer_norm(x), cache)
        x = self.resid_mid(self.skip_scale * x + self.residual_scale * mixed)
        return self.resid_post(self.skip_scale * x + self.residual_scale * self.ffn(self.ffn_norm(x)))
