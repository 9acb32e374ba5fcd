"""Projections whose output is scaled by their fan-in: the MixiT reference's ScaledLinear.

    y = (x W^T + b) * sqrt(base_fan_in / fan_in)

With weights drawn at a fixed std, the factor keeps each projection's output at the scale
it has at the base width, whatever the actual width (a muP-style width scaling). The
reference uses base_fan_in = 512 (its `base_hidden_size`) for every projection reading the
residual stream (V, O, gate, up, the output head) and 1 (its `base_intermediate_size`) for
the down projection, which is then scaled by 1/sqrt(d_ff).

The library's parts build plain `nn.Linear` layers; the reference construction turns them
into these after building (`scale_projections`, through `Construction.adapt`), so that
parameter names, initialisation and freezing stay those of a plain projection.
"""

from __future__ import annotations

import math

import torch
from torch import nn

# Projections that compute attention scores: scaling them would scale the logits, which
# the reference does not do (its Q and K are plain nn.Linear).
UNSCALED = ("q_proj", "k_proj")
# Projections that read a feed-forward hidden layer (the reference's base_intermediate_size).
HIDDEN = ("down_proj",)


class ScaledLinear(nn.Linear):
    """nn.Linear whose whole output, bias included, is multiplied by sqrt(base_fan_in / in_features).

    A subclass of nn.Linear, so initialisation, freezing and parameter names are those of a
    plain projection; only the forward pass differs."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True, *, base_fan_in: float):
        super().__init__(in_features, out_features, bias=bias)
        self._scale_by(base_fan_in)

    def _scale_by(self, base_fan_in: float) -> None:
        self.base_fan_in = base_fan_in
        self.output_scale = math.sqrt(base_fan_in / self.in_features)

    @classmethod
    def convert(cls, linear: nn.Linear, base_fan_in: float) -> None:
        """Turn a plain `nn.Linear` into a ScaledLinear in place (its parameters untouched)."""
        linear.__class__ = cls
        linear._scale_by(base_fan_in)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: (..., in_features) -> (..., out_features)."""
        return super().forward(x) * self.output_scale

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, output_scale={self.output_scale:.6g}"


def scale_projections(model: nn.Module, stream_base: float, hidden_base: float) -> None:
    """Every plain projection of `model` made a ScaledLinear: the down projections
    (`HIDDEN`) with `hidden_base`, the rest but Q and K (`UNSCALED`) with `stream_base`."""
    for name, module in model.named_modules():
        leaf = name.rsplit(".", 1)[-1]
        if type(module) is nn.Linear and leaf not in UNSCALED:
            ScaledLinear.convert(module, hidden_base if leaf in HIDDEN else stream_base)
