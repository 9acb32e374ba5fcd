"""MixiT: attention replaced by a fixed random mixing matrix (no Q, K, scores or softmax).

The matrix is a buffer, not a parameter, so nothing needs freezing: V, O, the feed-forward
modules, embeddings and head all train. `model.construction: reference` builds it as the
reference code does (learned positions, sink head, sqrt(0.5) skip and branch scaling, the
gated shaped MLP, ScaledLinear projections, biases: `modformer/papers/random_attention/construction.py`).
"""

from ..registry import VARIANTS
from .base import Variant
from .standard import build_decoder

VARIANTS.register("mixit")(Variant(
    build_decoder, mixer="mixing",
    description="fixed random mixing matrix per layer and head instead of attention (its options: model.mixer_options.*)",
))
