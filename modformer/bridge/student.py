"""A student that reads a teacher through bridges.

Bridges sit at named places of the student: `input` (after the token embedding, where the
reference puts its one bridge) and `block_i` (after student block i). Each is an
`EnhancedCrossAttention`. The teacher's states are an argument of the forward call: it hands
the student a `rewrite(place, h)` that runs the bridge at that place on them, so nothing is
held between calls, the student's own code is unchanged, and called alone it is exactly the
student alone. A modformer `Transformer` recomputes a block and its bridge together under
activation checkpointing.
"""

from __future__ import annotations

from typing import Mapping, Sequence

import torch
from torch import nn

from .cross_attention import EnhancedCrossAttention


def student_width(student: nn.Module) -> int:
    return student.width if hasattr(student, "width") else student.embed.weight.shape[1]


class BridgedStudent(nn.Module):
    def __init__(self, student: nn.Module, d_teacher: int, places: Sequence[str] = ("input",), *,
                 n_heads: int = 8, dropout: float = 0.1, adapter_bottleneck: int = 256):
        super().__init__()
        self.student = student
        d_student = student_width(student)
        known = student.places()
        wrong = [p for p in places if p not in known]
        if wrong:
            raise ValueError(f"bridge place must be 'input' or 'block_i' with i < {len(known) - 1}, got {wrong[0]!r}")
        self.bridges = nn.ModuleDict({place: EnhancedCrossAttention(
            d_student, d_teacher, n_heads, dropout=dropout, adapter_bottleneck=adapter_bottleneck) for place in places})

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
        states = {place: teacher_states[place].to(device) for place in self.bridges}
        visible = visible.to(device)

        def rewrite(place: str, h: torch.Tensor) -> torch.Tensor:
            return self.bridges[place](h, states[place], visible) if place in self.bridges else h

        return self.student(tokens, rewrite=rewrite)
