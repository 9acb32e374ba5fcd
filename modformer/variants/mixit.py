"""MixiT: attention replaced by a fixed random mixing matrix (no Q, K, scores or softmax).

The matrix is a buffer, not a parameter, so nothing needs freezing: V, O, the feed-forward
modules, embeddings and head all train. The reference code's other choices are options,
off by default; all together they are

    model.mixing.sink_head=true model.rope=false model.learned_positions=true
    model.residual_scale=0.7071 model.ffn=shaped_leaky_relu
"""

from functools import partial

from ..registry import VARIANTS
from .base import Variant
from .standard import build_decoder

VARIANTS.register("mixit")(Variant(
    partial(build_decoder, mixer="mixing"),
    description="fixed random mixing matrix per layer and head instead of attention (model.mixing.*)",
))
