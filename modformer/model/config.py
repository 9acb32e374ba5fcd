"""The `model` section of a run config."""

from __future__ import annotations

from dataclasses import dataclass

from ..configtools import option
from ..errors import ConfigError


@dataclass
class ModelConfig:
    variant: str = option("standard", "registered variant: a builder plus a freeze specification (`modformer list`)")
    mixer: str = option("attention", "sequence mixer of every block, by registered name")
    ffn: str = option("swiglu", "feed-forward module of every block, by registered name")
    vocab_size: int | None = option(None, "vocabulary size; null takes the task's")
    d_model: int = option(128, "residual stream width")
    n_layers: int = option(2, "number of blocks")
    n_heads: int = option(4, "attention heads; must divide d_model")
    n_kv_heads: int | None = option(None, "key/value heads for grouped-query attention; null means n_heads")
    d_ff: int | None = option(None, "feed-forward hidden width; null means 4 * d_model")
    max_seq_len: int = option(2048, "longest sequence the positional tables cover")
    rope: bool = option(True, "rotary position embedding in attention")
    rope_theta: float = option(10000.0, "RoPE base frequency")
    learned_positions: bool = option(False, "add learned absolute position embeddings to the input")
    attn_bias: bool = option(False, "biases on the Q, K, V and output projections")
    ffn_bias: bool = option(False, "biases on the feed-forward projections")
    norm_eps: float = option(1e-5, "RMSNorm epsilon")
    tie_embeddings: bool = option(False, "share the token embedding with the output head")
    init_std: float = option(0.02, "std of the normal init of linear and embedding weights")
    freeze: list[str] = option(
        default_factory=list,
        help="extra parameter-name glob patterns to freeze, on top of the variant's (e.g. 'blocks.0.*')",
    )

    def __post_init__(self) -> None:
        for key in ("d_model", "n_layers", "n_heads", "max_seq_len"):
            if getattr(self, key) < 1:
                raise ConfigError(f"model.{key} must be positive, got {getattr(self, key)}")
        for key in ("vocab_size", "n_kv_heads", "d_ff"):
            value = getattr(self, key)
            if value is not None and value < 1:
                raise ConfigError(f"model.{key} must be positive or null, got {value}")
        if self.d_model % self.n_heads:
            raise ConfigError(f"model.n_heads={self.n_heads} does not divide model.d_model={self.d_model}")
        if self.head_dim % 2 and self.rope:
            raise ConfigError(f"model.rope needs an even head width, got d_model/n_heads={self.head_dim}")
        if self.n_heads % self.kv_heads:
            raise ConfigError(f"model.n_kv_heads={self.n_kv_heads} does not divide model.n_heads={self.n_heads}")
        if self.rope_theta <= 0 or self.norm_eps <= 0 or self.init_std <= 0:
            raise ConfigError("model.rope_theta, model.norm_eps and model.init_std must be positive")

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads

    @property
    def kv_heads(self) -> int:
        return self.n_kv_heads or self.n_heads

    @property
    def ffn_dim(self) -> int:
        return self.d_ff or 4 * self.d_model
