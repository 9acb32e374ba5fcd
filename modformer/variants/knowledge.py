"""The knowledge-base decoder (arXiv 2501.00823): every FFN is a read of ONE shared base E.

The mixer stays as configured (`model.mixer`); each block's feed-forward slot is a
`KnowledgeFFN` over the same `KnowledgeBase`, registered once on the model as `knowledge`
(parameter `knowledge.entries`; with `model.knowledge.groups`, one base per group of layers,
`knowledge.{g}.entries`). `model.knowledge.*` sets the base and the readers;
`model.ffn` and `model.ffn_bias` are not read (b2 is always there, as in the paper): the
activation is `model.knowledge.activation`. `model.ffn` may name the FFN that activation
folds into (a sweep's shared section: `ffn: relu` for standard, `knowledge.activation:
relu` here); anything else is refused rather than built without it.
Everything trains; `model.freeze=['blocks.*']` (and the other parts) leaves only E to train.
"""

from __future__ import annotations

from torch import nn

from ..model.config import ModelConfig
from ..model.knowledge import KnowledgeBase, KnowledgeFFN
from ..model.transformer import Transformer
from ..registry import VARIANTS
from .base import Variant
from .standard import build_decoder


def knowledge_ffn(base: KnowledgeBase, cfg: ModelConfig) -> KnowledgeFFN:
    """One block's reader of `base`, as `model.knowledge` configures it."""
    kc = cfg.knowledge
    # d_key None: the reader takes the base's entry width, as `KnowledgeConfig.sizes` resolves it.
    return KnowledgeFFN(base, cfg.d_model, d_key=kc.d_key, activation=kc.activation, threshold=kc.threshold,
                        threshold_hidden=kc.threshold_hidden)


def build_knowledge(cfg: ModelConfig) -> Transformer:
    """The configured decoder with every feed-forward module replaced by a reader of one base
    (or of its group's base, with `model.knowledge.groups`)."""
    n_entries, d_entry, _ = cfg.knowledge.sizes(cfg.d_model, cfg.ffn_dim)
    groups = cfg.knowledge.groups
    bases = [KnowledgeBase(n_entries, d_entry) for _ in (groups or [None])]
    base_of = {i: bases[g] for g, group in enumerate(groups) for i in group} if groups else None
    layer = iter(range(cfg.n_layers))  # build_decoder makes the FFNs in layer order
    model = build_decoder(cfg, ffn=lambda c: knowledge_ffn(base_of[next(layer)] if base_of else bases[0], c))
    # The one place each E is registered.
    model.add_module("knowledge", nn.ModuleList(bases) if groups else bases[0])
    return model


VARIANTS.register("knowledge")(Variant(
    build_knowledge, description="every FFN is cross-attention over one shared knowledge base (model.knowledge.*)",
    own_ffn=lambda cfg: cfg.knowledge.activation))
