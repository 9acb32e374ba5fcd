"""What the model was given, for a part that reads more than its block's input.

A mixer or feed-forward module sees the residual stream of its block, `x` (B, T, d_model).
A part that also needs what went into the model (the token ids, the embedding output, the
positions, the padding) declares it by a keyword parameter `inputs` in its `forward`:

    class StaticQK(nn.Module):
        def forward(self, x: torch.Tensor, cache: LayerCache | None = None, *,
                    inputs: ModelInputs) -> torch.Tensor:
            q = self.q_proj(inputs.embedded)   # queries from the static embeddings, not from x
            ...

and the block hands it one `ModelInputs` per forward pass, the same at training, evaluation,
cached generation, under activation checkpointing (the block's recomputation gets the same
object) and under `torch.compile`. A part without the parameter is called as before, and a
model none of whose parts read it builds none (no cost).

With a key-value cache each forward pass holds only the new tokens: `tokens`, `embedded`
and `positions` are theirs (positions continue the cached ones), and a part keeps what it
needs of earlier tokens in its own `LayerCache`, as attention keeps its keys.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, replace

import torch
from torch import nn


@dataclass(frozen=True)
class ModelInputs:
    """The model's inputs as one block's part receives them.

    Attributes:
        tokens: the token ids of this forward pass, (B, T) int64.
        embedded: the embedding output, (B, T, d_model): the token embeddings, plus the
            learned absolute positions where the model has them, after the `embed_out` hook;
            what the first block receives.
        positions: each token's position in its sequence, (T,) int64: 0..T-1, or after a
            cache of `offset` tokens offset..offset+T-1.
        padding_mask: (B, T) bool, True at real tokens and False at the model's pad token;
            None where the model has no pad token (`model.pad_id` unresolved).
        embed: the model's token embedding, ids (...) -> (..., d_model), for a part that
            embeds ids of its own (a fixed text); its weight is the model's, trained with it.
        layer: the index of the block this part sits in, 0 at the bottom.
        n_layers: the number of blocks.
    """

    tokens: torch.Tensor
    embedded: torch.Tensor
    positions: torch.Tensor
    padding_mask: torch.Tensor | None
    embed: nn.Embedding
    layer: int
    n_layers: int

    def at_layer(self, layer: int) -> ModelInputs:
        """The same inputs, as block `layer` receives them."""
        return replace(self, layer=layer)


def reads_inputs(part: nn.Module) -> bool:
    """Whether `part`'s forward takes the keyword `inputs` (a `ModelInputs`)."""
    return "inputs" in inspect.signature(part.forward).parameters
