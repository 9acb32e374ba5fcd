"""The `model` section of a run config."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..configtools import option
from ..errors import ConfigError
from .knowledge import KnowledgeConfig
from .layers import LayersValue, layer_list


@dataclass
class ModelConfig:
    construction: str = option(
        "corrected", "how keys this config leaves unset are filled in: corrected (our defaults, every option as "
                     "written here) or a registered construction that fills in another codebase's values for the "
                     "chosen variant and task, every explicit key still winning (`modformer list` names them)")
    construction_options: dict[str, Any] = option(
        default_factory=dict, help="the construction's own options (its readings, where the codebase it follows "
                                   "has two), checked against the options it declares (`modformer list`)")
    variant: str = option("standard", "registered variant: a builder plus a freeze specification (`modformer list`)")
    mixer: str = option("attention", "sequence mixer of every block: a registered name, an import path "
                                     "package.module:Class, or an entry point (`modformer list`)")
    mixer_options: dict[str, Any] = option(
        default_factory=dict, help="the mixer's own options, for a part that declares them (a dataclass `Options` "
                                   "beside it: modformer/model/part_options.py), ours as every other: attention's "
                                   "AttentionOptions, mixing's MixingOptions (`modformer list --options`)")
    ffn: str = option("swiglu", "feed-forward module of every block: a registered name, an import path "
                                "package.module:Class, or an entry point")
    ffn_options: dict[str, Any] = option(default_factory=dict,
                                         help="the feed-forward module's own options (as model.mixer_options)")
    layers: LayersValue = option(
        default_factory=list, help="per-layer stack: what a layer builds where it departs from model.variant, "
                                   "model.mixer and model.ffn; a list of one entry per layer ([mixit, standard]) "
                                   "or a mapping of the layers that differ ({-1: frozen_qk}); an entry is a "
                                   "variant's name or a mapping of model.layers keys (variant, mixer, "
                                   "mixer_options, ffn, ffn_options, freeze: modformer/model/layers.py); "
                                   "empty: every layer alike")
    vocab_size: int | None = option(None, "vocabulary size; null takes the task's")
    d_model: int = option(128, "residual stream width")
    n_layers: int = option(2, "number of blocks")
    n_heads: int = option(4, "attention heads; must divide d_model")
    n_kv_heads: int | None = option(None, "key/value heads for grouped-query attention; null means n_heads")
    d_ff: int | None = option(None, "feed-forward hidden width; null means 4 * d_model")
    max_seq_len: int | None = option(None, "longest sequence (positional tables, mixing matrices); null: the task's")
    rope: bool = option(True, "rotary position embedding in attention")
    rope_theta: float = option(10000.0, "RoPE base frequency")
    learned_positions: bool = option(False, "add learned absolute position embeddings to the input")
    attn_bias: bool = option(False, "biases on the Q, K, V and output projections")
    ffn_bias: bool = option(False, "biases on the feed-forward projections")
    norm_eps: float = option(1e-5, "RMSNorm epsilon")
    tie_embeddings: bool = option(False, "share the token embedding with the output head")
    pad_embedding_frozen: bool = option(
        False, "the pad token's embedding row is zero at init and never trained (nn.Embedding's padding_idx, as the "
               "reference classifier has it)")
    pad_id: int | None = option(None, "the pad token, whose row model.pad_embedding_frozen fixes at zero and whose "
                                      "positions a part reading the model's inputs sees masked (ModelInputs."
                                      "padding_mask); null: the task's where pad_embedding_frozen, else none")
    init_std: float = option(0.02, "std of the normal init of linear and embedding weights")
    knowledge: KnowledgeConfig = option(default_factory=KnowledgeConfig,
                                        help="the shared knowledge base and its readers (the knowledge variant)")
    freeze: list[str] = option(
        default_factory=list,
        help="extra parameter-name glob patterns to freeze, on top of the variant's (e.g. 'blocks.0.*')",
    )
    train_only: list[str] = option(
        default_factory=list,
        help="if set, parameter-name glob patterns of the only parameters that train; every other one is frozen "
             "(e.g. ['knowledge.entries'] to update only the knowledge base; the variant's freeze still applies)",
    )

    def __post_init__(self) -> None:
        for key in ("d_model", "n_layers", "n_heads"):
            if getattr(self, key) < 1:
                raise ConfigError(f"model.{key} must be positive, got {getattr(self, key)}")
        for key in ("vocab_size", "n_kv_heads", "d_ff", "max_seq_len"):
            value = getattr(self, key)
            if value is not None and value < 1:
                raise ConfigError(f"model.{key} must be positive or null, got {value}")
        if self.d_model % self.n_heads:
            raise ConfigError(f"model.n_heads={self.n_heads} does not divide model.d_model={self.d_model}")
        if self.head_dim % 2 and self.rope:
            raise ConfigError(f"model.rope needs an even head width, got d_model/n_heads={self.head_dim}")
        if self.n_heads % self.kv_heads:
            raise ConfigError(f"model.n_kv_heads={self.n_kv_heads} does not divide model.n_heads={self.n_heads}")
        if self.pad_id is not None and not 0 <= self.pad_id < (self.vocab_size or self.pad_id + 1):
            raise ConfigError(f"model.pad_id={self.pad_id} is not a token of the vocabulary ({self.vocab_size})")
        for key in ("rope_theta", "norm_eps", "init_std"):
            if getattr(self, key) <= 0:
                raise ConfigError(f"model.{key} must be positive, got {getattr(self, key)}")
        self.knowledge.check_groups(self.n_layers)
        self.layers = layer_list(self.layers, self.n_layers)

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads

    @property
    def kv_heads(self) -> int:
        return self.n_kv_heads or self.n_heads

    @property
    def ffn_dim(self) -> int:
        return self.d_ff or 4 * self.d_model
