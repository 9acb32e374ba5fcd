"""Registered tasks; importing this package registers them all."""

from . import retrieval  # noqa: F401
from .base import IGNORE, Batch, Task, TaskConfig

__all__ = ["IGNORE", "Batch", "Task", "TaskConfig"]
