"""Freeze specifications: parameter-name glob patterns applied with `requires_grad_`."""

from __future__ import annotations

import fnmatch
from typing import Iterable

from torch import nn

from .errors import ConfigError


def matching_parameters(model: nn.Module, pattern: str) -> list[str]:
    return [name for name, _ in model.named_parameters() if fnmatch.fnmatchcase(name, pattern)]


def freeze(model: nn.Module, patterns: Iterable[str]) -> list[str]:
    """Set `requires_grad=False` on every parameter matching any pattern; return their names.

    A pattern that matches nothing is an error: a typo must not silently freeze nothing.
    Parameters that match no pattern are left as they are.
    """
    params = dict(model.named_parameters())
    frozen: list[str] = []
    for pattern in patterns:
        names = matching_parameters(model, pattern)
        if not names:
            examples = ", ".join(list(params)[:6])
            raise ConfigError(f"freeze pattern '{pattern}' matches no parameter (names look like: {examples}, ...)")
        frozen += [n for n in names if n not in frozen]
    for name in frozen:
        params[name].requires_grad_(False)
    return frozen


def trainable_names(model: nn.Module) -> list[str]:
    return [name for name, p in model.named_parameters() if p.requires_grad]
