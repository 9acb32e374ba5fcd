"""The frozen teacher: a model whose hidden states of one layer the student reads.

`Teacher` wraps a Hugging Face model (anything that returns `hidden_states` when asked) or
a modformer `Transformer`. It is frozen for good: no parameter requires grad, it is in eval
mode and `train()` cannot switch it back, so it never enters an optimizer nor changes
dropout. Layer numbering follows Hugging Face: 0 is the embedding output, i is after block
i, and the last (n or -1) is after the final norm, as Hugging Face's last hidden state is
(for a modformer model: the hook points `embed_out`, `blocks.{i-1}.resid_post`, and
`hidden_states` for the last).
"""

from __future__ import annotations

import torch
from torch import nn

from ..errors import ModformerError
from ..model.hooks import capture
from ..model.transformer import Transformer


class Teacher(nn.Module):
    def __init__(self, model: nn.Module, layer: int = -1):
        super().__init__()
        self.model = model
        n = len(model.blocks) if isinstance(model, Transformer) else model.config.num_hidden_layers
        if not -(n + 1) <= layer <= n:
            raise ModformerError(f"teacher layer {layer} does not exist: the teacher has hidden states 0..{n} "
                                 f"(or -{n + 1}..-1)")
        self.layer = layer
        model.requires_grad_(False)
        super().train(False)

    def train(self, mode: bool = True) -> "Teacher":
        return self  # stays in eval mode whatever its owner does

    @property
    def width(self) -> int:
        if isinstance(self.model, Transformer):
            return self.model.embed.weight.shape[1]
        return self.model.config.hidden_size

    @torch.no_grad()
    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        """input_ids (B, U) -> hidden states of `layer`, (B, U, d_teacher) float32, on the
        teacher's device (the inputs are moved there)."""
        device = next(self.model.parameters()).device
        input_ids = input_ids.to(device)
        attention_mask = None if attention_mask is None else attention_mask.to(device)
        if isinstance(self.model, Transformer):
            n = len(self.model.blocks)
            index = self.layer % (n + 1)
            if index == n:
                return self.model.hidden_states(input_ids).float()
            name = "embed_out" if index == 0 else f"blocks.{index - 1}.resid_post"
            with capture(self.model, name) as acts:
                self.model.hidden_states(input_ids)
            return acts[name].float()
        out = self.model(input_ids=input_ids, attention_mask=attention_mask, output_hidden_states=True)
        return out.hidden_states[self.layer].float()
