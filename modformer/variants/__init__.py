"""Variants. Every module in this package is imported here, so a new variant is a new file
with one `VARIANTS.register(name)(Variant(...))` line; nothing else changes."""

import importlib
import pkgutil

from .base import Variant, build_model

for _module in pkgutil.iter_modules(__path__):
    if _module.name != "base":
        importlib.import_module(f"{__name__}.{_module.name}")

__all__ = ["Variant", "build_model"]
