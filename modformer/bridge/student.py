"""A student that reads a teacher through bridges.

Bridges sit at named places of the student: `input` (after the token embedding, where the
reference puts its one bridge) and `block_i` (after student block i). Each is an
`EnhancedCrossAttention` attached as a forward hook on the module there (for a modformer
`Transformer` its hook points `embed_out` and `blocks.{i}.resid_post`; a Hugging Face
student (`HFStudent`) names its embedding and decoder layers), so the student's own code is
unchanged and, called without teacher states, it is exactly the student alone.
"""

from __future__ import annotations

from typing import Mapping, Sequence

import torch
from torch import nn

from .cross_attention import EnhancedCrossAttention


def bridge_points(student: nn.Module) -> dict[str, nn.Module]:
    """place -> the module of `student` whose output a bridge there rewrites."""
    if hasattr(student, "bridge_points"):
        return student.bridge_points()
    modules = dict(student.named_modules())
    return {"input": modules["embed_out"],
            **{f"block_{i}": modules[f"blocks.{i}.resid_post"] for i in range(len(student.blocks))}}


def student_width(student: nn.Module) -> int:
    return student.width if hasattr(student, "width") else student.embed.weight.shape[1]


class BridgedStudent(nn.Module):
    def __init__(self, student: nn.Module, d_teacher: int, places: Sequence[str] = ("input",), *,
                 n_heads: int = 8, dropout: float = 0.1, adapter_bottleneck: int = 256):
        super().__init__()
        self.student = student
        d_student = student_width(student)
        points = bridge_points(student)
        wrong = [p for p in places if p not in points]
        if wrong:
            raise ValueError(f"bridge place must be 'input' or 'block_i' with i < {len(points) - 1}, got {wrong[0]!r}")
        self.bridges = nn.ModuleDict({place: EnhancedCrossAttention(
            d_student, d_teacher, n_heads, dropout=dropout, adapter_bottleneck=adapter_bottleneck) for place in places})
        self._reading: tuple[dict[str, torch.Tensor], torch.Tensor] | None = None
        self._handles = [points[place].register_forward_hook(self._bridge_hook(place)) for place in places]

    def remove(self) -> nn.Module:
        """Detach the bridges from the student (which is then exactly as before) and return it."""
        for handle in self._handles:
            handle.remove()
        self._handles = []
        return self.student

    def _bridge_hook(self, place: str):
        def hook(_module, _inputs, output):
            if self._reading is None:  # the student called alone
                return output
            states, visible = self._reading
            if isinstance(output, tuple):  # some Hugging Face layers return (hidden states, extras...)
                return (self.bridges[place](output[0], states[place], visible), *output[1:])
            return self.bridges[place](output, states[place], visible)
        return hook

    def forward(self, tokens: torch.Tensor, teacher_states: torch.Tensor | Mapping[str, torch.Tensor],
                visible: torch.Tensor) -> torch.Tensor:
        """tokens (B, S), teacher_states (B, U, d_teacher) for every bridge, or place -> (B, U,
        d_teacher) (bridges reading different teacher layers), visible (B, S) counts or (B, S, U)
        bool (see `EnhancedCrossAttention`) -> logits (B, S, vocab)."""
        device = tokens.device
        if isinstance(teacher_states, torch.Tensor):
            teacher_states = dict.fromkeys(self.bridges, teacher_states)
        missing = [place for place in self.bridges if place not in teacher_states]
        if missing:
            raise ValueError(f"no teacher states for the bridge at {missing[0]}")
        self._reading = ({place: teacher_states[place].to(device) for place in self.bridges}, visible.to(device))
        try:
            return self.student(tokens)
        finally:
            self._reading = None
