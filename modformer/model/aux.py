"""Auxiliary losses: a part's own objective (a mixture of experts' load balancing, a
regulariser), added to the training loss through one channel.

A part owns an `AuxLoss` submodule and passes it a scalar tensor in its forward:

    class MoE(nn.Module):
        def __init__(self, cfg, options):
            ...
            self.balance = AuxLoss(weight=options.balance_weight)

        def forward(self, x):
            ...
            self.balance(n_experts * (load * importance).sum())   # returns its input
            return out

The training step (every training loop: `train/loop.py`) collects every `AuxLoss` called in
its forward (`collecting`), by module
name (`blocks.0.ffn.balance`), and differentiates task loss + sum of weight x value; the
weight is the part's, or `train.aux_weights` (a glob over the names, e.g.
`{"blocks.*.ffn.balance": 0.0}`). metrics.jsonl logs the task loss as `loss` and each term's
mean over the log window, unweighted, under `aux` (`{"blocks.0.ffn.balance": 1.02}`); the
trackers show them as `train/aux/<name>`, the run's summary and the sweep report the last.
Outside a training step (evaluation, generation, the recomputation of a checkpointed block
in backward) an `AuxLoss` records nothing and costs nothing.
"""

from __future__ import annotations

import contextlib
import fnmatch
from typing import Iterator

import torch
from torch import nn

from ..errors import ConfigError

_COLLECTORS: list["AuxTerms"] = []


class AuxLoss(nn.Module):
    """Where a part hands its auxiliary loss to the training step.

    Args:
        weight: the term's default weight in the loss (train.aux_weights may set another).
    """

    def __init__(self, weight: float = 1.0):
        super().__init__()
        self.weight = float(weight)

    def forward(self, value: torch.Tensor) -> torch.Tensor:
        """Record `value` (a scalar tensor) for the training step collecting now, if any; returns it."""
        if _COLLECTORS:
            if value.dim() != 0:
                raise ValueError(f"an auxiliary loss must be a scalar tensor, got shape {tuple(value.shape)}")
            _COLLECTORS[-1].add(self, value)
        return value

    def extra_repr(self) -> str:
        return f"weight={self.weight}"


class AuxTerms:
    """The auxiliary losses of one forward pass, by the `AuxLoss` module's name."""

    def __init__(self, model: nn.Module, weights: dict[str, float]):
        self.names = {id(m): name for name, m in model.named_modules() if isinstance(m, AuxLoss)}
        self.weights = weights
        self.values: dict[str, torch.Tensor] = {}
        self.modules: dict[str, AuxLoss] = {}

    def add(self, module: AuxLoss, value: torch.Tensor) -> None:
        name = self.names.get(id(module), "aux")  # a module outside the model: still counted
        self.values[name] = self.values[name] + value if name in self.values else value  # called twice: summed
        self.modules[name] = module

    def weight(self, name: str) -> float:
        """train.aux_weights' weight for `name` (the first glob matching it), else the part's."""
        for pattern, weight in self.weights.items():
            if fnmatch.fnmatchcase(name, pattern):
                return weight
        return self.modules[name].weight

    def total(self) -> torch.Tensor | float:
        """sum of weight x value over the terms (0.0 when there are none); a term of weight 0
        is left out, so that it cannot turn the loss into nan."""
        return sum((self.weight(n) * v for n, v in self.values.items() if self.weight(n) != 0), 0.0)

    def logged(self) -> dict[str, float]:
        """Each term's value, unweighted, as numbers."""
        return {name: float(v.detach()) for name, v in self.values.items()}


@contextlib.contextmanager
def collecting(model: nn.Module, weights: dict[str, float] | None = None) -> Iterator[AuxTerms]:
    """Collect the auxiliary losses `model`'s parts hand over in the forward passes run inside."""
    terms = AuxTerms(model, dict(weights or {}))
    _COLLECTORS.append(terms)
    try:
        yield terms
    finally:
        _COLLECTORS.remove(terms)


def check_aux_weights(model: nn.Module, weights: dict[str, float]) -> None:
    """Each `train.aux_weights` glob must name an auxiliary loss of the model (a typo must not
    leave a loss at its default weight silently)."""
    names = [name for name, m in model.named_modules() if isinstance(m, AuxLoss)]
    for pattern in weights:
        if not any(fnmatch.fnmatchcase(n, pattern) for n in names):
            raise ConfigError(f"train.aux_weights: '{pattern}' names no auxiliary loss of this model "
                              f"({', '.join(names) or 'it has none'})")
