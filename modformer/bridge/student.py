"""A modformer student that reads a teacher through bridges.

Bridges sit at named places of the student: `input` (after the token embedding, where the
reference puts its one bridge) and `block_i` (after student block i). Each is an
`EnhancedCrossAttention` attached as a forward hook on the student's hook point there
(`embed_out`, `blocks.{i}.resid_post`), so the student's own code is unchanged and, called
without teacher states, it is exactly the student alone.
"""

from __future__ import annotations

from typing import Sequence

import torch
from torch import nn

from ..model.transformer import Transformer
from .cross_attention import EnhancedCrossAttention


def _hook_point(place: str, n_layers: int) -> str:
    if place == "input":
        return "embed_out"
    if place.startswith("block_") and place[6:].isdigit() and int(place[6:]) < n_layers:
        return f"blocks.{int(place[6:])}.resid_post"
    raise ValueError(f"bridge place must be 'input' or 'block_i' with i < {n_layers}, got {place!r}")


class BridgedStudent(nn.Module):
    def __init__(self, student: Transformer, d_teacher: int, places: Sequence[str] = ("input",), *,
                 n_heads: int = 8, dropout: float = 0.1, adapter_bottleneck: int = 256):
        super().__init__()
        self.student = student
        d_student = student.embed.weight.shape[1]
        points = {place: _hook_point(place, len(student.blocks)) for place in places}
        self.bridges = nn.ModuleDict({place: EnhancedCrossAttention(
            d_student, d_teacher, n_heads, dropout=dropout, adapter_bottleneck=adapter_bottleneck) for place in places})
        self._reading: tuple[torch.Tensor, torch.Tensor] | None = None
        modules = dict(student.named_modules())
        self._handles = [modules[point].register_forward_hook(self._bridge_hook(place))
                         for place, point in points.items()]

    def remove(self) -> Transformer:
        """Detach the bridges from the student (which is then exactly as before) and return it."""
        for handle in self._handles:
            handle.remove()
        self._handles = []
        return self.student

    def _bridge_hook(self, place: str):
        def hook(_module, _inputs, output):
            if self._reading is None:  # the student called alone
                return output
            return self.bridges[place](output, *self._reading)
        return hook

    def forward(self, tokens: torch.Tensor, teacher_states: torch.Tensor, visible: torch.Tensor) -> torch.Tensor:
        """tokens (B, S), teacher_states (B, U, d_teacher), visible (B, S) -> logits (B, S, vocab)."""
        device = tokens.device
        self._reading = (teacher_states.to(device), visible.to(device))
        try:
            return self.student(tokens)
        finally:
            self._reading = None
