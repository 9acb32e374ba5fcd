"""Projections whose output is scaled by their fan-in: the MixiT reference's ScaledLinear.

    y = (x W^T + b) * sqrt(base_fan_in / fan_in)

With weights drawn at a fixed std, the factor keeps each projection's output at the scale
it has at the base width, whatever the actual width (a muP-style width scaling). The
reference uses base_fan_in = 512 (its `base_hidden_size`) for every projection reading the
residual stream (V, O, gate, up, the output head) and 1 (its `base_intermediate_size`) for
the down projection, which is then scaled by 1/sqrt(d_ff).

`projection(cfg)` gives the factory every part builds its linear layers with: plain
`nn.Linear` unless `model.scaled_linear` is set.
"""

from __future__ import annotations

import math
from typing import Protocol

import torch
from torch import nn

from .config import ModelConfig


class ScaledLinear(nn.Linear):
    """nn.Linear whose whole output, bias included, is multiplied by sqrt(base_fan_in / in_features).

    A subclass of nn.Linear, so initialisation, freezing and parameter names are those of a
    plain projection; only the forward pass differs."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True, *, base_fan_in: float):
        super().__init__(in_features, out_features, bias=bias)
        self.base_fan_in = base_fan_in
        self.output_scale = math.sqrt(base_fan_in / in_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: (..., in_features) -> (..., out_features)."""
        return super().forward(x) * self.output_scale

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, output_scale={self.output_scale:.6g}"


class Projection(Protocol):
    def __call__(self, in_features: int, out_features: int, bias: bool = False, *,
                 down: bool = False) -> nn.Linear:
        """A linear layer; `down` marks a projection reading a feed-forward hidden layer."""


def plain_linear(in_features: int, out_features: int, bias: bool = False, *, down: bool = False) -> nn.Linear:
    return nn.Linear(in_features, out_features, bias=bias)


def projection(cfg: ModelConfig) -> Projection:
    """The linear-layer factory of `cfg`: ScaledLinear with the configured bases, or nn.Linear."""
    if cfg.scaled_linear is None:
        return plain_linear
    stream_base, hidden_base = cfg.scaled_linear

    def scaled(in_features: int, out_features: int, bias: bool = False, *, down: bool = False) -> nn.Linear:
        return ScaledLinear(in_features, out_features, bias, base_fan_in=hidden_base if down else stream_base)

    return scaled
