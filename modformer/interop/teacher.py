"""The frozen teacher: a model whose hidden states of chosen layers the student reads.

`Teacher` wraps a Hugging Face model (anything that returns `hidden_states` when asked) or
a modformer `Transformer`. It is frozen for good: no parameter requires grad, it is in eval
mode and `train()` cannot switch it back, so it never enters an optimizer nor changes
dropout. Layer numbering follows Hugging Face: 0 is the embedding output, i is after block
i, and the last (n or -1) is after the final norm, as Hugging Face's last hidden state is
(for a modformer model: the hook points `embed_out`, `blocks.{i-1}.resid_post`, and
`hidden_states` for the last).
"""

from __future__ import annotations

from contextlib import ExitStack
from typing import Sequence

import torch
from torch import nn

from ..errors import ModformerError
from ..model.hooks import capture
from ..model.transformer import Transformer


class Teacher(nn.Module):
    """A frozen model whose hidden states of `layer` the student reads (the module's docstring
    says how layers are numbered).

    Args:
        model: a Hugging Face model that returns `hidden_states`, or a modformer `Transformer`.
        layer: the hidden states `forward` returns: 0 the embedding output, i after block i,
            n or -1 after the final norm.
    """

    def __init__(self, model: nn.Module, layer: int = -1):
        super().__init__()
        self.model = model
        self.n_layers = len(model.blocks) if isinstance(model, Transformer) else model.config.num_hidden_layers
        self.layer = self.check_layer(layer)
        model.requires_grad_(False)
        super().train(False)

    def train(self, mode: bool = True) -> "Teacher":
        return self  # stays in eval mode whatever its owner does

    def check_layer(self, layer: int) -> int:
        n = self.n_layers
        if not -(n + 1) <= layer <= n:
            raise ModformerError(f"teacher layer {layer} does not exist: the teacher has hidden states 0..{n} "
                                 f"(or -{n + 1}..-1)")
        return layer

    @property
    def width(self) -> int:
        if isinstance(self.model, Transformer):
            return self.model.embed.weight.shape[1]
        return self.model.config.hidden_size

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        """input_ids (B, U) -> hidden states of `layer`, (B, U, d_teacher) float32, on the
        teacher's device (the inputs are moved there)."""
        return self.hidden(input_ids, attention_mask, [self.layer])[0]

    @torch.no_grad()
    def hidden(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None,
               layers: Sequence[int]) -> list[torch.Tensor]:
        """input_ids (B, U) -> the hidden states of each of `layers`, (B, U, d_teacher) float32
        each, from one forward pass."""
        layers = [self.check_layer(layer) for layer in layers]
        device = next(self.model.parameters()).device
        input_ids = input_ids.to(device)
        attention_mask = None if attention_mask is None else attention_mask.to(device)
        if isinstance(self.model, Transformer):
            n = self.n_layers
            inner = {layer: "embed_out" if layer % (n + 1) == 0 else f"blocks.{layer % (n + 1) - 1}.resid_post"
                     for layer in layers if layer % (n + 1) != n}
            with ExitStack() as stack:
                acts = stack.enter_context(capture(self.model, *set(inner.values()))) if inner else {}
                last = self.model.hidden_states(input_ids)
            return [(acts[inner[layer]] if layer in inner else last).float() for layer in layers]
        out = self.model(input_ids=input_ids, attention_mask=attention_mask, output_hidden_states=True)
        return [out.hidden_states[layer].float() for layer in layers]
