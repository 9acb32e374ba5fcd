"""The random transformer (Zhong and Andreas 2024): only the embeddings and the head train."""

from ..registry import VARIANTS
from .base import Variant
from .standard import build_decoder

VARIANTS.register("random_transformer")(Variant(
    build_decoder, freeze=("blocks.*", "norm.*"),
    description="the whole body (blocks and final norm) fixed at init; embeddings and head train",
))
