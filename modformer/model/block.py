"""A pre-norm residual block that is handed its sequence mixer and its feed-forward module."""

from __future__ import annotations

import torch
from torch import nn

from .cache import LayerCache
from .hooks import HookPoint
from .inputs import ModelInputs, reads_inputs


class Block(nn.Module):
    """skip * x + residual * mixer(norm(x)), then the same with ffn(norm(x)).

    The block knows nothing about what its parts are: attention, a fixed mixing matrix, an
    FFN or a knowledge read are all just modules mapping (B, T, d) to (B, T, d). A part whose
    forward takes the keyword `inputs` is also handed the model's inputs (`ModelInputs`,
    modformer/model/inputs.py).
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
        # Read once here: which parts take `inputs=` (a part's signature does not change).
        self.mixer_reads_inputs = reads_inputs(mixer)
        self.ffn_reads_inputs = reads_inputs(ffn)

    @property
    def reads_inputs(self) -> bool:
        """Whether a part of this block takes the model's inputs (`ModelInputs`)."""
        return self.mixer_reads_inputs or self.ffn_reads_inputs

    def forward(self, x: torch.Tensor, cache: LayerCache | None = None,
                inputs: ModelInputs | None = None) -> torch.Tensor:
        """x: (B, T, d_model) -> (B, T, d_model). `cache` goes to the mixer, the only part that
        looks across positions.

        Args:
            x: the residual stream, (B, T, d_model).
            cache: this layer's key-value cache for cached generation, passed to the mixer as
                `mixer(norm(x), cache)`; None: the mixer is called without it.
            inputs: the model's inputs as this block receives them, passed as `inputs=` to a
                part that takes them (required then); None: the block's parts read only x.

        Returns:
            The block's output, (B, T, d_model), also passed through `resid_post`.
        """
        if inputs is None and self.reads_inputs:
            raise ValueError("a part of this block reads the model's inputs (forward(..., inputs=)): call the block "
                             "with inputs=ModelInputs(...), as the Transformer does")
        given = {"inputs": inputs} if self.mixer_reads_inputs else {}
        h = self.mixer_norm(x)
        mixed = self.mixer(h, **given) if cache is None else self.mixer(h, cache, **given)
        x = self.resid_mid(self.skip_scale * x + self.residual_scale * mixed)
        given = {"inputs": inputs} if self.ffn_reads_inputs else {}
        return self.resid_post(self.skip_scale * x + self.residual_scale * self.ffn(self.ffn_norm(x), **given))
