"""The standard Llama-style decoder: everything trains."""

from __future__ import annotations

from typing import Callable

from torch import nn

from ..model.block import Block
from ..model.config import ModelConfig
from ..model.part_options import make_part
from ..model.scaled_linear import projection
from ..model.transformer import Transformer
from ..registry import FFNS, MIXERS, VARIANTS
from .base import Variant


def build_decoder(cfg: ModelConfig, *, ffn: Callable[[ModelConfig], nn.Module] | None = None) -> Transformer:
    """Blocks of the configured mixer and feed-forward module (or the feed-forward modules
    `ffn` makes, called once per block), pre-norm RMSNorm."""
    def make_ffn() -> nn.Module:
        return ffn(cfg) if ffn is not None else make_part(FFNS, cfg.ffn, cfg.ffn_options, "model.ffn_options", cfg)

    blocks = [
        Block(cfg.d_model, make_part(MIXERS, cfg.mixer, cfg.mixer_options, "model.mixer_options", cfg), make_ffn(),
              norm_eps=cfg.norm_eps, residual_scale=cfg.residual_scale, skip_scale=cfg.skip_scale)
        for _ in range(cfg.n_layers)
    ]
    return Transformer(
        cfg.vocab_size, cfg.d_model, blocks, norm_eps=cfg.norm_eps, tie_embeddings=cfg.tie_embeddings,
        max_positions=cfg.max_seq_len if cfg.learned_positions else None, max_seq_len=cfg.max_seq_len,
        linear=projection(cfg), padding_idx=cfg.pad_id if cfg.pad_embedding_frozen else None,
    )


VARIANTS.register("standard")(Variant(build_decoder, description="Llama-style decoder, all parameters train"))
