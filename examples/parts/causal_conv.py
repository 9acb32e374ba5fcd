"""A sequence mixer of our own: a causal depthwise convolution over the last `kernel` positions."""

from dataclasses import dataclass

import torch
from torch import nn

from modformer.configtools import option


@dataclass
class CausalConvOptions:
    kernel: int = option(4, "how many positions (this one and the ones before it) each output reads")

    def __post_init__(self):
        if self.kernel < 1:
            raise ValueError("kernel must be at least 1")


class CausalConv(nn.Module):
    Options = CausalConvOptions

    def __init__(self, cfg, options: CausalConvOptions):
        super().__init__()
        self.kernel = options.kernel
        self.conv = nn.Conv1d(cfg.d_model, cfg.d_model, options.kernel, groups=cfg.d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: (B, T, d_model) -> (B, T, d_model); position t reads positions t-kernel+1 .. t."""
        padded = nn.functional.pad(x.transpose(1, 2), (self.kernel - 1, 0))  # zeros before the start
        return self.conv(padded).transpose(1, 2)
