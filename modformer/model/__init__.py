"""Model parts. Every module in this package is imported here, so a new mixer or
feed-forward module is a new file with one `MIXERS.register(name)` / `FFNS.register(name)`
line; nothing else changes."""

import importlib
import pkgutil

from .block import Block
from .config import ModelConfig
from .transformer import Transformer

for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")

__all__ = ["Block", "ModelConfig", "Transformer"]
