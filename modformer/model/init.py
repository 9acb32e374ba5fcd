"""Deterministic weight initialisation from a local generator."""

from __future__ import annotations

import torch
from torch import nn


def init_weights(model: nn.Module, std: float, generator: torch.Generator) -> None:
    """Set every parameter of `model` from `generator`, in module order:

    - linear and embedding weights Normal(0, std) (std x the module's `init_std_scale`
      where it sets one), their biases zero, an embedding's
      `padding_idx` row zero (it never receives a gradient either), RMSNorm gains one;
    - a module with its own scheme defines `init_parameters(std, generator)`, and its
      children are left to it;
    - any other module's own parameters (a convolution, a gate, a part from outside this
      library): matrices and larger Normal(0, std), as `model.init_std` says; vectors and
      scalars (biases, gains) keep the values their constructor gave them, which
      `build_model` draws from the run's seed.

    Draws come from `generator`, so a seed fixes the model without touching torch's global RNG.

    Args:
        model: the model whose parameters are set, in place.
        std: the standard deviation of the normal draws (`model.init_std`).
        generator: the only source of the draws.
    """
    skip: set[str] = set()
    for name, module in model.named_modules():
        if any(name.startswith(prefix + ".") for prefix in skip):
            continue
        if hasattr(module, "init_parameters") and module is not model:
            module.init_parameters(std, generator)
            skip.add(name)
            continue
        with torch.no_grad():
            if isinstance(module, (nn.Linear, nn.Embedding)):
                module.weight.normal_(0.0, std * getattr(module, "init_std_scale", 1.0), generator=generator)
                if getattr(module, "bias", None) is not None:
                    module.bias.zero_()
                if getattr(module, "padding_idx", None) is not None:  # nn.Embedding's own rule
                    module.weight[module.padding_idx].zero_()
            elif isinstance(module, nn.RMSNorm):
                if module.weight is not None:
                    module.weight.fill_(1.0)
            else:
                for param in module.parameters(recurse=False):
                    if param.dim() >= 2:
                        param.normal_(0.0, std, generator=generator)
