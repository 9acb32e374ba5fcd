"""Feed-forward modules for a block's state-mixing slot."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from ..registry import FFNS
from .config import ModelConfig


class SwiGLU(nn.Module):
    """down(silu(gate(x)) * up(x)): Llama's MLP, with Llama's parameter names."""

    def __init__(self, d_model: int, d_ff: int, bias: bool = False):
        super().__init__()
        self.gate_proj = nn.Linear(d_model, d_ff, bias=bias)
        self.up_proj = nn.Linear(d_model, d_ff, bias=bias)
        self.down_proj = nn.Linear(d_ff, d_model, bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: (..., d_model) -> (..., d_model)."""
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


@FFNS.register("swiglu")
def build_swiglu(cfg: ModelConfig) -> SwiGLU:
    return SwiGLU(cfg.d_model, cfg.ffn_dim, bias=cfg.ffn_bias)


@FFNS.register("relu")
def build_relu(cfg: ModelConfig) -> ReLUFFN:
    return ReLUFFN(cfg.d_model, cfg.ffn_dim, bias=cfg.ffn_bias)


def shaped_slope(d_model: int, c_minus: float = -1.0) -> tuple[float, float]:
    """(slope, gain) of the shaped LeakyReLU: slope 1 + c_minus / sqrt(d_model) keeps the
    activation close to linear as width grows (the "shaped" regime), and gain
    sqrt(2 / (1 + slope^2)) (torch's calculate_gain('leaky_relu', slope)) keeps the variance of
    a unit Gaussian input, as a ReLU's sqrt(2) gain does."""
    slope = 1.0 + c_minus / math.sqrt(d_model)
    return slope, math.sqrt(2.0 / (1.0 + slope ** 2))


class ShapedLeakyReLUFFN(nn.Module):
    """down(gain * leaky_relu(up(x), slope)): the shaped MLP of the reference's GPT-2 model,
    without a gate (`shaped_slope` gives slope and gain)."""

    def __init__(self, d_model: int, d_ff: int, bias: bool = False):
        super().__init__()
        self.up_proj = nn.Linear(d_model, d_ff, bias=bias)
        self.down_proj = nn.Linear(d_ff, d_model, bias=bias)
        self.slope, self.gain = shaped_slope(d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: (..., d_model) -> (..., d_model)."""
        return self.down_proj(self.gain * F.leaky_relu(self.up_proj(x), self.slope))


@FFNS.register("shaped_leaky_relu")
def build_shaped_leaky_relu(cfg: ModelConfig) -> ShapedLeakyReLUFFN:
    return ShapedLeakyReLUFFN(cfg.d_model, cfg.ffn_dim, bias=cfg.ffn_bias)


class ShapedGatedLeakyReLUFFN(nn.Module):
    """down(gain * leaky_relu(gate(x), slope) * up(x)): the MixiT reference's Llama MLP in
    mixing mode, Llama's gated MLP with the shaped LeakyReLU in place of SiLU (`shaped_slope`
    gives slope and gain). Llama's parameter names."""

    def __init__(self, d_model: int, d_ff: int, bias: bool = False):
        super().__init__()
        self.gate_proj = nn.Linear(d_model, d_ff, bias=bias)
        self.up_proj = nn.Linear(d_model, d_ff, bias=bias)
        self.down_proj = nn.Linear(d_ff, d_model, bias=bias)
        self.slope, self.gain = shaped_slope(d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: (..., d_model) -> (..., d_model)."""
        return self.down_proj(self.gain * F.leaky_relu(self.gate_proj(x), self.slope) * self.up_proj(x))


@FFNS.register("shaped_leaky_glu")
def build_shaped_leaky_glu(cfg: ModelConfig) -> ShapedGatedLeakyReLUFFN:
    return ShapedGatedLeakyReLUFFN(cfg.d_model, cfg.ffn_dim, bias=cfg.ffn_bias)


class ActivationFFN(nn.Module):
    """down(act(up(x))) for a pointwise activation by name: relu, gelu (exact, erf) or silu.

    The two-layer FFN of the original transformer, and the form a folded knowledge layer
    takes (with biases).
    """

    ACTIVATIONS = {"relu": F.relu, "gelu": F.gelu, "silu": F.silu}

    def __init__(self, d_model: int, d_ff: int, activation: str, bias: bool = False):
        super().__init__()
        if activation not in self.ACTIVATIONS:
            raise ValueError(f"activation must be one of {sorted(self.ACTIVATIONS)}, got {activation!r}")
        self.activation = activation
        self.up_proj = nn.Linear(d_model, d_ff, bias=bias)
        self.down_proj = nn.Linear(d_ff, d_model, bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: (..., d_model) -> (..., d_model)."""
        return self.down_proj(self.ACTIVATIONS[self.activation](self.up_proj(x)))


class ReLUFFN(ActivationFFN):
    """down(relu(up(x))): the two-layer FFN of the original transformer."""

    def __init__(self, d_model: int, d_ff: int, bias: bool = False):
        super().__init__(d_model, d_ff, "relu", bias=bias)


@FFNS.register("gelu")
def build_gelu(cfg: ModelConfig) -> ActivationFFN:
    return ActivationFFN(cfg.d_model, cfg.ffn_dim, "gelu", bias=cfg.ffn_bias)


@FFNS.register("silu")
def build_silu(cfg: ModelConfig) -> ActivationFFN:
    return ActivationFFN(cfg.d_model, cfg.ffn_dim, "silu", bias=cfg.ffn_bias)
