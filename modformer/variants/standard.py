"""The standard Llama-style decoder: everything trains."""

from __future__ import annotations

from typing import Callable

from torch import nn

from ..model.block import Block
from ..model.config import ModelConfig
from ..model.layers import LayerConfig
from ..model.part_options import make_part
from ..model.transformer import Transformer
from ..registry import FFNS, MIXERS, VARIANTS
from .base import Variant
from .stack import layer_plan


def build_decoder(cfg: ModelConfig, *, ffn: Callable[[ModelConfig], nn.Module] | None = None) -> Transformer:
    """Blocks of the configured mixer and feed-forward module, per layer where `model.layers`
    gives a stack (or the feed-forward modules `ffn` makes, called once per block, bottom
    first), pre-norm RMSNorm."""
    def make_ffn(i: int, layer: LayerConfig) -> nn.Module:
        key = f"model.layers[{i}].ffn_options" if cfg.layers else "model.ffn_options"
        return ffn(cfg) if ffn is not None else make_part(FFNS, layer.ffn, layer.ffn_options, key, cfg, layer=i)

    def make_mixer(i: int, layer: LayerConfig) -> nn.Module:
        key = f"model.layers[{i}].mixer_options" if cfg.layers else "model.mixer_options"
        return make_part(MIXERS, layer.mixer, layer.mixer_options, key, cfg, layer=i)

    blocks = [Block(cfg.d_model, make_mixer(i, layer), make_ffn(i, layer), norm_eps=cfg.norm_eps)
              for i, layer in enumerate(layer_plan(cfg))]
    return Transformer(
        cfg.vocab_size, cfg.d_model, blocks, norm_eps=cfg.norm_eps, tie_embeddings=cfg.tie_embeddings,
        max_positions=cfg.max_seq_len if cfg.learned_positions else None, max_seq_len=cfg.max_seq_len,
        padding_idx=cfg.pad_id if cfg.pad_embedding_frozen else None, pad_id=cfg.pad_id,
    )


VARIANTS.register("standard")(Variant(build_decoder, description="Llama-style decoder, all parameters train"))
