"""Frozen-QK: attention's query and key projections stay at their random initial values."""

from ..registry import VARIANTS
from .base import Variant
from .standard import build_decoder

VARIANTS.register("frozen_qk")(Variant(
    build_decoder,
    freeze=("blocks.*.mixer.q_proj.*", "blocks.*.mixer.k_proj.*"), mixer="attention",
    description="Q and K projections (weights and biases) fixed at init",
))
