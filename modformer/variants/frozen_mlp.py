"""Frozen-MLP: every feed-forward parameter stays at its random initial value."""

from ..registry import VARIANTS
from .base import Variant
from .standard import build_decoder

VARIANTS.register("frozen_mlp")(Variant(
    build_decoder, freeze=("blocks.*.ffn.*",), description="every feed-forward parameter fixed at init"))
