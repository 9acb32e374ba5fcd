"""Deterministic weight initialisation from a local generator."""

from __future__ import annotations

import torch
from torch import nn


def init_weights(model: nn.Module, std: float, generator: torch.Generator) -> None:
    """Normal(0, std) for linear and embedding weights, zero biases, unit norm gains.

    Draws come from `generator` in module order, so a seed fixes the model without touching
    torch's global RNG. A module with its own scheme defines
    `init_parameters(std, generator)`; its children are then left to it.
    """
    skip: set[str] = set()
    for name, module in model.named_modules():
        if any(name.startswith(prefix + ".") for prefix in skip):
            continue
        if hasattr(module, "init_parameters") and module is not model:
            module.init_parameters(std, generator)
            skip.add(name)
        elif isinstance(module, (nn.Linear, nn.Embedding)):
            with torch.no_grad():
                module.weight.normal_(0.0, std, generator=generator)
                if getattr(module, "bias", None) is not None:
                    module.bias.zero_()
        elif isinstance(module, nn.RMSNorm) and module.weight is not None:
            with torch.no_grad():
                module.weight.fill_(1.0)
