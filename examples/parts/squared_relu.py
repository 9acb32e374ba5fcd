"""A feed-forward module of our own: down(relu(up(x))^2), the squared ReLU of Primer."""

import torch
from torch import nn


class SquaredReLU(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        hidden = cfg.d_ff or 4 * cfg.d_model
        self.up = nn.Linear(cfg.d_model, hidden, bias=False)
        self.down = nn.Linear(hidden, cfg.d_model, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: (B, T, d_model) -> (B, T, d_model)."""
        return self.down(torch.relu(self.up(x)).square())
