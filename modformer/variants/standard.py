"""The standard Llama-style decoder: everything trains."""

from __future__ import annotations

from typing import Callable

from torch import nn

from ..model.block import Block
from ..model.config import ModelConfig
from ..model.scaled_linear import projection
from ..model.transformer import Transformer
from ..registry import FFNS, MIXERS, VARIANTS
from .base import Variant


def build_decoder(cfg: ModelConfig, *, ffn: str | Callable[[ModelConfig], nn.Module] | None = None) -> Transformer:
    """Blocks of the configured mixer and the given (default: configured) feed-forward
    module, pre-norm RMSNorm. `ffn` is a registered name or a factory called once per block."""
    mixer_factory = MIXERS[cfg.mixer]
    ffn_factory = ffn if callable(ffn) else FFNS[ffn or cfg.ffn]
    blocks = [
        Block(cfg.d_model, mixer_factory(cfg), ffn_factory(cfg), norm_eps=cfg.norm_eps,
              residual_scale=cfg.residual_scale, skip_scale=cfg.skip_scale)
        for _ in range(cfg.n_layers)
    ]
    return Transformer(
        cfg.vocab_size, cfg.d_model, blocks, norm_eps=cfg.norm_eps, tie_embeddings=cfg.tie_embeddings,
        max_positions=cfg.max_seq_len if cfg.learned_positions else None, max_seq_len=cfg.max_seq_len,
        linear=projection(cfg),
    )


VARIANTS.register("standard")(Variant(build_decoder, description="Llama-style decoder, all parameters train"))
