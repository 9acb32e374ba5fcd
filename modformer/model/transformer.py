"""The decoder: embeddings, a stack of blocks, a final norm and an output head."""

from __future__ import annotations

import inspect

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from .block import Block
from .cache import KVCache
from .hooks import HookPoint, pinned
from .inputs import ModelInputs

class Transformer(nn.Module):
    """tokens (B, T) -> logits (B, T, vocab).

    Parameter names: `embed`, `positions` (only with learned absolute positions),
    `blocks.{i}.{mixer,ffn,mixer_norm,ffn_norm}.*`, `norm`, `lm_head` (absent when tied to
    the embedding). Hook points: `embed_out` (B, T, d) and each block's own.

    `activation_checkpointing` (off; the trainer sets it from train.activation_checkpointing)
    keeps only each block's input for backward and runs the block's forward again there,
    whenever gradients are being recorded: less memory for about one more forward pass, the
    same gradients. It is not part of the weights or their names. Hooks inside a block run
    again in the recomputation and must give the same result there.

    A caller changes the residual stream through the hook points (`hooks.hooked`):
    `embed_out` after the embedding, `blocks.{i}.resid_post` after block i. `BridgedStudent`
    runs its bridges there, so under activation checkpointing a bridge is recomputed with its
    block.

    Args:
        vocab_size: the vocabulary size, the rows of the embedding and outputs of the head.
        d_model: the model width d.
        blocks: the blocks, in order, each mapping (B, T, d) to (B, T, d).
        norm_eps: epsilon of the final RMSNorm.
        tie_embeddings: use the embedding's transpose as the output head (no `lm_head`).
        max_positions: the number of learned absolute position embeddings (`positions`);
            None: none (the positions come from the mixers).
        max_seq_len: the longest input the parts were built for, kept as `max_seq_len`
            (None: no limit); read by callers, not enforced here.
        padding_idx: an embedding row kept zero that never receives a gradient; None: none.
        pad_id: the pad token, whose positions `ModelInputs.padding_mask` marks False for a
            part that reads the model's inputs; None: no padding mask.
    """

    def __init__(self, vocab_size: int, d_model: int, blocks: list[Block], *, norm_eps: float = 1e-5,
                 tie_embeddings: bool = False, max_positions: int | None = None, max_seq_len: int | None = None,
                 padding_idx: int | None = None,
                 pad_id: int | None = None):
        super().__init__()
        self.pad_id = pad_id
        self.max_seq_len = max_seq_len  # the longest input its parts were built for (None: no limit)
        self.activation_checkpointing = False
        # padding_idx: a row that is zero and never receives a gradient (the reference classifier's pad).
        self.embed = nn.Embedding(vocab_size, d_model, padding_idx=padding_idx)
        self.positions = nn.Embedding(max_positions, d_model) if max_positions else None
        self.embed_out = HookPoint()
        self.blocks = nn.ModuleList(blocks)
        self.norm = nn.RMSNorm(d_model, eps=norm_eps)
        self.lm_head = None if tie_embeddings else nn.Linear(d_model, vocab_size, bias=False)

    @property
    def vocab_size(self) -> int:
        return self.embed.num_embeddings

    def hidden_states(self, tokens: torch.Tensor, cache: KVCache | None = None) -> torch.Tensor:
        """tokens (B, T) -> final normed hidden states (B, T, d_model). With `cache`, tokens
        continue the cached ones (positions cache.length ..), and the cache is extended.

        Args:
            tokens: token ids, (B, T) int64.
            cache: a `KVCache` (`new_cache()`) for cached generation: tokens continue the
                cached ones and the cache is extended; None: no cache.

        Returns:
            The final normed hidden states, (B, T, d_model).
        """
        offset = 0 if cache is None else cache.length
        x = self.embed(tokens)
        if self.positions is not None:
            end = offset + tokens.shape[1]
            if end > self.positions.num_embeddings:
                raise ValueError(f"sequence length {end} exceeds model.max_seq_len={self.positions.num_embeddings}")
            x = x + self.positions.weight[offset:end]
        x = self.embed_out(x)
        inputs = self._inputs(tokens, x, offset) if any(block.reads_inputs for block in self.blocks) else None
        recompute = self.activation_checkpointing and cache is None and torch.is_grad_enabled()
        for i, block in enumerate(self.blocks):
            given = None if inputs is None else inputs.at_layer(i)
            if cache is not None:
                x = block(x, cache.layer(i), given)
            elif recompute:  # non-reentrant: works with frozen blocks and inputs that need no grad
                x = checkpoint(pinned(block), x, None, given, use_reentrant=False)
            else:
                x = block(x, None, given)
        if cache is not None:
            cache.length = offset + tokens.shape[1]
        return self.norm(x)

    def _inputs(self, tokens: torch.Tensor, embedded: torch.Tensor, offset: int) -> ModelInputs:
        """tokens (B, T), embedded (B, T, d) -> what a part reading the model's inputs gets."""
        positions = torch.arange(offset, offset + tokens.shape[1], device=tokens.device)
        padding = None if self.pad_id is None else tokens != self.pad_id
        return ModelInputs(tokens, embedded, positions, padding, self.embed, layer=0, n_layers=len(self.blocks))

    def forward(self, tokens: torch.Tensor, cache: KVCache | None = None) -> torch.Tensor:
        """tokens (B, T) int64 -> logits (B, T, vocab_size); see `hidden_states` for `cache`.

        Args:
            tokens: token ids, (B, T) int64.
            cache: a `KVCache` for cached generation, as `hidden_states` reads it; None: none.

        Returns:
            The logits, (B, T, vocab_size).
        """
        h = self.hidden_states(tokens, cache)
        return h @ self.embed.weight.T if self.lm_head is None else self.lm_head(h)

    def new_cache(self) -> KVCache:
        return KVCache(len(self.blocks))

    def supports_cache(self) -> bool:
        """Whether every block's mixer takes a key-value cache (`forward(x, cache)`): ours do;
        a part from elsewhere may not, and generation then recomputes the whole sequence.

        Returns:
            True when every block's mixer's `forward` has a parameter named `cache`.
        """
        return all("cache" in inspect.signature(block.mixer.forward).parameters for block in self.blocks)

    def parameter_counts(self) -> dict[str, int]:
        """{"total": all parameters, "trainable": those with requires_grad}.

        Returns:
            `{"total": n, "trainable": m}`: the numbers of scalars of all parameters and of
                those with `requires_grad`.
        """
        return {"total": sum(p.numel() for p in self.parameters()),
                "trainable": sum(p.numel() for p in self.parameters() if p.requires_grad)}


def unplain_parts(model: nn.Module) -> list[str]:
    """The modules of `model` that a construction's `adapt` made other than the library's plain
    parts: projections of a subclass of nn.Linear (a scaled one), blocks whose skip or branch
    is scaled. A conversion that reads the weights as plain maps would lose them."""
    return [name for name, m in model.named_modules()
            if isinstance(m, nn.Linear) and type(m) is not nn.Linear
            or isinstance(m, Block) and (m.skip_scale != 1 or m.residual_scale != 1)]
