"""Tasks. Every module in this package is imported here, so a new task is a new file whose
class carries `@TASKS.register(name)`; nothing else changes."""

import importlib
import pkgutil

from .base import IGNORE, Batch, Task, TaskConfig

for _module in pkgutil.iter_modules(__path__):
    if _module.name != "base":
        importlib.import_module(f"{__name__}.{_module.name}")

__all__ = ["IGNORE", "Batch", "Task", "TaskConfig"]
