"""Registered variants; importing this package registers them all."""

from . import standard  # noqa: F401
from .base import Variant, build_model

__all__ = ["Variant", "build_model"]
