"""A sequence mixer of our own: an exponential moving average with a learned decay per channel
(the tutorial docs/tutorials/own_mixer.py shows it, trains it and sweeps it)."""

from dataclasses import dataclass

import torch
from torch import nn

from modformer.configtools import option


@dataclass
class EMAOptions:
    decay: float = option(0.9, "initial decay of every channel's running average, in (0, 1)")

    def __post_init__(self):
        if not 0 < self.decay < 1:
            raise ValueError("decay must be in (0, 1)")


class EMAMixer(nn.Module):
    """y_t = W_o((1 - a) * sum_{s <= t} a^(t - s) * W_i x_s), a learned decay a per channel."""

    Options = EMAOptions

    def __init__(self, cfg, options: EMAOptions):
        super().__init__()
        self.in_proj = nn.Linear(cfg.d_model, cfg.d_model, bias=False)
        self.out_proj = nn.Linear(cfg.d_model, cfg.d_model, bias=False)
        logit = float(torch.logit(torch.tensor(options.decay)))
        # A vector: modformer's initialisation keeps it as built.
        self.decay_logit = nn.Parameter(torch.full((cfg.d_model,), logit))

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (B, T, d_model) -> (B, T, d_model)
        a = torch.sigmoid(self.decay_logit)  # (d_model,)
        t = torch.arange(x.shape[1], device=x.device)
        lag = (t[:, None] - t[None, :]).clamp(min=0)  # (T, T): how far back each position reads
        past = (t[:, None] >= t[None, :])[..., None]  # (T, T, 1): causal
        weights = torch.where(past, (1 - a) * a ** lag[..., None], 0.0)  # (T, T, d_model)
        return self.out_proj(torch.einsum("tsd,bsd->btd", weights, self.in_proj(x)))
