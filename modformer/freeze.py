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


def freeze_all_but(model: nn.Module, patterns: Iterable[str]) -> list[str]:
    """Freeze every parameter that matches none of `patterns`; return the names frozen.

    Each pattern must match some parameter (a typo must not freeze everything)."""
    patterns = list(patterns)
    for pattern in patterns:
        if not matching_parameters(model, pattern):
            names = ", ".join(name for name, _ in list(model.named_parameters())[:6])
            raise ConfigError(f"train_only pattern '{pattern}' matches no parameter (names look like: {names}, ...)")
    keep = {name for pattern in patterns for name in matching_parameters(model, pattern)}
    frozen = freeze(model, [name for name, _ in model.named_parameters() if name not in keep])
    if not any(p.requires_grad for p in model.parameters()):
        raise ConfigError(f"train_only {patterns} leaves nothing to train: every parameter it names is frozen "
                          f"by the variant or model.freeze")
    return frozen
