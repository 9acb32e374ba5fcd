"""Deconstructing Attention (Xue, Moosavi, Aletras; arXiv 2510.11602) as a modformer paper plugin.

What it adds, all through its `register(paper)` (docs/plugins.md):
- three mixers, `rndembqk`, `fixedseqqk` and `staticembqk` (`sourced_qk.py`): attention whose
  queries and keys come from fixed random embeddings, the embeddings of a fixed text, or the
  input's static embeddings (read through `ModelInputs`);
- a variant of each name, built block by block, so each can be one layer's
  (`model.layers: {1: standard, 3: standard}` in a model of `model.variant: rndembqk`);
- a report section (`sweep.paper: decon_attention`): each arm against Standard, seed by seed.

Its experiment is `retrieval.yaml` beside this package: the paper's placements as a sweep's arms.
"""

from __future__ import annotations

from modformer.plugins import Paper
from modformer.registry import MIXERS, VARIANTS
from modformer.variants import Variant
from modformer.variants.standard import build_decoder

from .section import HEADING, section
from .sourced_qk import FixedSeqQK, RndEmbQK, StaticEmbQK

MIXER_CLASSES = {"rndembqk": RndEmbQK, "fixedseqqk": FixedSeqQK, "staticembqk": StaticEmbQK}
DESCRIPTIONS = {
    "rndembqk": "Q and K from fixed random per-position embeddings: one pattern for every input",
    "fixedseqqk": "Q and K from the model's embeddings of a fixed token sequence: one pattern for every input",
    "staticembqk": "Q and K from the input's static embeddings: token-dependent, context-free",
}


def register(paper: Paper) -> None:
    """Called once by `import modformer`, with this paper's handle (named decon_attention)."""
    for name, cls in MIXER_CLASSES.items():
        paper.part(MIXERS, name, cls)
        paper.part(VARIANTS, name, Variant(build_decoder, mixer=name, description=DESCRIPTIONS[name]))
    paper.section(section, printed=HEADING)


__all__ = ["register", "RndEmbQK", "FixedSeqQK", "StaticEmbQK"]
