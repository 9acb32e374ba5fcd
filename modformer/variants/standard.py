"""The standard Llama-style decoder: everything trains."""

from __future__ import annotations

from ..model.block import Block
from ..model.config import ModelConfig
from ..model.transformer import Transformer
from ..registry import FFNS, MIXERS, VARIANTS
from .base import Variant


def build_decoder(cfg: ModelConfig) -> Transformer:
    """Blocks of the configured mixer and feed-forward module, pre-norm, RMSNorm."""
    blocks = [
        Block(cfg.d_model, MIXERS[cfg.mixer](cfg), FFNS[cfg.ffn](cfg), norm_eps=cfg.norm_eps)
        for _ in range(cfg.n_layers)
    ]
    return Transformer(
        cfg.vocab_size, cfg.d_model, blocks, norm_eps=cfg.norm_eps, tie_embeddings=cfg.tie_embeddings,
        max_positions=cfg.max_seq_len if cfg.learned_positions else None,
    )


VARIANTS.register("standard")(Variant(build_decoder, description="Llama-style decoder, all parameters train"))
