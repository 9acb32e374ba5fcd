"""Attention whose queries and keys come from somewhere other than the layer's hidden state.

"Deconstructing Attention" (arXiv 2510.11602) relaxes the coupling of Q and K to the current
layer's input three ways; each is a mixer here, reading the model's inputs through
`ModelInputs` (modformer/model/inputs.py) where it needs them:

- `RndEmbQK`: Q and K from fixed random embeddings, one per position, drawn from the run's
  seed and never trained: every input gets the same pattern;
- `FixedSeqQK`: Q and K from the model's own embeddings of a fixed token sequence (our
  reading of "a fixed 2,048-token text": a fixed draw from the vocabulary, the same for every
  run; the embeddings train with the model): every input gets the same pattern, which
  training can still move;
- `StaticEmbQK`: Q and K from the input's embedding output (`ModelInputs.embedded`): the
  pattern depends on the tokens but not on their context.

V and O read the hidden state as in standard attention; the projections, RoPE, the causal
mask, the key-value cache and the `pattern` hook point are attention's
(`modformer.model.attention.SelfAttention`). The source passes through an RMSNorm of its own,
as the hidden state does through the block's, so that the scores start at the spread
standard attention's do.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from modformer.configtools import option
from modformer.model.attention import SelfAttention
from modformer.model.cache import LayerCache
from modformer.model.inputs import ModelInputs
from modformer.model.rope import RotaryEmbedding


class SourcedQKAttention(SelfAttention):
    """Causal attention with Q and K from `source(inputs)` and V from x."""

    def __init__(self, cfg):
        rope = RotaryEmbedding(cfg.head_dim, cfg.max_seq_len, cfg.rope_theta) if cfg.rope else None
        super().__init__(cfg.d_model, cfg.n_heads, cfg.n_kv_heads, bias=cfg.attn_bias, rope=rope)
        self.source_norm = nn.RMSNorm(cfg.d_model, eps=cfg.norm_eps)
        self.max_seq_len = cfg.max_seq_len

    def source(self, inputs: ModelInputs) -> torch.Tensor:
        """What Q and K are computed from: (B or 1, T, d_model) at `inputs.positions`."""
        raise NotImplementedError

    @staticmethod
    def _at_positions(table: torch.Tensor, inputs: ModelInputs) -> torch.Tensor:
        """Rows `inputs.positions` of a per-position table (max_seq_len, ...) -> (1, T, ...)."""
        return table[inputs.positions].unsqueeze(0)

    def forward(self, x: torch.Tensor, cache: LayerCache | None = None, *, inputs: ModelInputs) -> torch.Tensor:
        """x: (B, T, d_model) -> (B, T, d_model); with `cache`, x holds the tokens after the
        cache's `offset` earlier ones, whose keys and values it holds (and gains these)."""
        B, T, _ = x.shape
        offset = 0 if cache is None else cache.offset
        if offset + T > self.max_seq_len:  # a per-position source has no row there
            raise ValueError(f"{type(self).__name__} was built for {self.max_seq_len} positions (model.max_seq_len), "
                             f"not {offset + T}")
        s = self.source_norm(self.source(inputs))  # (B or 1, T, d)
        q = self.q_proj(s).view(s.shape[0], T, self.n_heads, self.head_dim).transpose(1, 2).expand(B, -1, -1, -1)
        k = self.k_proj(s).view(s.shape[0], T, self.n_kv_heads, self.head_dim).transpose(1, 2).expand(B, -1, -1, -1)
        v = self.v_proj(x).view(B, T, self.n_kv_heads, self.head_dim).transpose(1, 2)
        if self.rope is not None:
            q, k = self.rope(q, offset), self.rope(k, offset)
        if cache is not None:
            k, v = cache.extend("k", k), cache.extend("v", v)  # (B, Hkv, offset + T, hd)
        mask = torch.ones(T, offset + T, dtype=torch.bool, device=x.device).tril(offset) if offset and T > 1 else None
        if self.pattern.active:
            y = self._explicit(q, k, v, offset)
        else:
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=not offset,
                                               enable_gqa=self.n_kv_heads != self.n_heads)
        return self.o_proj(y.transpose(1, 2).reshape(B, T, -1))


class RndEmbQK(SourcedQKAttention):
    """Q and K from fixed random embeddings, one N(0, 1) row per position (a buffer, drawn
    from the run's seed as the model is built; never trained)."""

    def __init__(self, cfg):
        super().__init__(cfg)
        self.register_buffer("random_embeddings", torch.randn(cfg.max_seq_len, cfg.d_model))

    def source(self, inputs: ModelInputs) -> torch.Tensor:
        return self._at_positions(self.random_embeddings, inputs)


@dataclass
class FixedSeqOptions:
    text_seed: int = option(0, "seed of the fixed token sequence (drawn uniformly from the vocabulary), the same "
                               "for every run and layer; the paper's is a fixed 2,048-token text")

    def __post_init__(self) -> None:
        if self.text_seed < 0:
            raise ValueError(f"text_seed must be >= 0, got {self.text_seed}")


class FixedSeqQK(SourcedQKAttention):
    """Q and K from the model's embeddings of a fixed token sequence (`text_seed`)."""

    Options = FixedSeqOptions

    def __init__(self, cfg, options: FixedSeqOptions):
        super().__init__(cfg)
        text = torch.randint(cfg.vocab_size, (cfg.max_seq_len,), generator=torch.Generator().manual_seed(
            options.text_seed))
        self.register_buffer("text", text)

    def source(self, inputs: ModelInputs) -> torch.Tensor:
        return inputs.embed(self._at_positions(self.text, inputs))


class StaticEmbQK(SourcedQKAttention):
    """Q and K from the tokens' embedding output: token-dependent, context-free."""

    def source(self, inputs: ModelInputs) -> torch.Tensor:
        return inputs.embedded
