"""A student that reads a teacher through bridges.

Bridges sit at named places of the student: `input` (after the token embedding, where the
reference puts its one bridge; hook point `embed_out`) and `block_i` (after student block i;
hook point `blocks.{i}.resid_post`). Each is an `EnhancedCrossAttention`. The teacher's states
are an argument of the forward call, which runs each bridge at its place's hook point
(`hooks.hooked`) for that call only: nothing is held between calls, the student's own code is
unchanged, and called alone it is exactly the student alone. A modformer `Transformer`
recomputes a block and its bridge together under activation checkpointing. Each bridge's
gate is a hook point too (`bridges.{place}.gate_value`).
"""

from __future__ import annotations

from typing import Mapping, Sequence

import torch
from torch import nn

from .hooks import hook_names, hooked
from .cross_attention import EnhancedCrossAttention


def bridge_hook(place: str) -> str:
    """The hook point of the student a bridge at `place` rewrites.

    Args:
        place: `input` or `block_i`.

    Returns:
        `embed_out` for `input`, `blocks.{i}.resid_post` for `block_i`.
    """
    return "embed_out" if place == "input" else f"blocks.{place.removeprefix('block_')}.resid_post"


def student_width(student: nn.Module) -> int:
    """The width of a student: its `width`, or its embedding's columns (a modformer model)."""
    return student.width if hasattr(student, "width") else student.embed.weight.shape[1]


class BridgedStudent(nn.Module):
    """A student with a bridge at each of `places`, reading the teacher states a call brings.

    Args:
        student: a modformer `Transformer` or an `HFStudent` (hook points `embed_out` and
            `blocks.{i}.resid_post`).
        d_teacher: the width of the teacher's states.
        places: where the bridges go: `input` and/or `block_i`.
        n_heads: attention heads of each bridge.
        dropout: attention dropout of each bridge while training.
        adapter_bottleneck: the width of each bridge's adapter.
    """

    def __init__(self, student: nn.Module, d_teacher: int, places: Sequence[str] = ("input",), *,
                 n_heads: int = 8, dropout: float = 0.1, adapter_bottleneck: int = 256):
        super().__init__()
        self.student = student
        d_student = student_width(student)
        points = set(hook_names(student))
        n_blocks = sum(f"blocks.{i}.resid_post" in points for i in range(len(points)))
        wrong = [p for p in places if not (p == "input" or p.startswith("block_")) or bridge_hook(p) not in points]
        if wrong:
            raise ValueError(f"bridge place must be 'input' or 'block_i' with i < {n_blocks}, got {wrong[0]!r}")
        self.bridges = nn.ModuleDict({place: EnhancedCrossAttention(
            d_student, d_teacher, n_heads, dropout=dropout, adapter_bottleneck=adapter_bottleneck) for place in places})

    def forward(self, tokens: torch.Tensor, teacher_states: torch.Tensor | Mapping[str, torch.Tensor],
                visible: torch.Tensor, cache=None) -> torch.Tensor:
        """tokens (B, S), teacher_states (B, U, d_teacher) for every bridge, or place -> (B, U,
        d_teacher) (bridges reading different teacher layers), visible (B, S) counts or (B, S, U)
        bool (see `EnhancedCrossAttention`) -> logits (B, S, vocab). With `cache` (a modformer
        student's `new_cache()`), tokens continue the cached ones, as `Transformer.forward`
        reads it: `visible` is then that of the new positions only, and the bridges read the
        teacher states that those may see (the earlier positions' bridge outputs are in the
        student's cache already)."""
        device = tokens.device
        if isinstance(teacher_states, torch.Tensor):
            teacher_states = dict.fromkeys(self.bridges, teacher_states)
        missing = [place for place in self.bridges if place not in teacher_states]
        if missing:
            raise ValueError(f"no teacher states for the bridge at {missing[0]}")
        states = {place: teacher_states[place].to(device) for place in self.bridges}
        visible = visible.to(device)

        def run_bridge(place: str):
            return lambda _name, h: self.bridges[place](h, states[place], visible)

        with hooked(self.student, {bridge_hook(place): run_bridge(place) for place in self.bridges}):
            return self.student(tokens) if cache is None else self.student(tokens, cache)
