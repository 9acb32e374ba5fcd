"""Enhanced cross-attention: the bridge through which a student reads a frozen teacher.

Following the reference (`model.py` of the LLM Modules paper), for student states h (B, S,
d_s) and teacher states t (B, U, d_t):

    q = W_q LN_s(h),  k = W_k LN_t(t),  v = W_v LN_t(t)        # W_k, W_v: d_t -> d_s
    a = W_o MultiHeadAttention(q, k, v)                       # masked by visibility
    a = a + LN(fc2(GELU(fc1(a))))                             # adapter, bottleneck 256
    g = sigmoid(W_g [h; a] + b_g)                             # a gate per feature
    out = g * a + (1 - g) * h

Unlike the reference, attention is masked by a visibility tensor (see `alignment` and
`pairing`): student position i reads only teacher positions below visible[b, i] (or those
a boolean mask allows), so the bridge is causal unless a leaky visibility is passed on purpose. A position that may read nothing gets a = 0 before
the adapter (not a softmax over an empty set). With the gate's weights at zero and its bias
at -inf, g = 0 and out = h exactly: the student alone. The gate g (B, S, d_s) passes through
the hook point `gate_value`, so it can be read (`capture`) or set (`hooked`) like any activation.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .hooks import HookPoint


class EnhancedCrossAttention(nn.Module):
    """The bridge: student states read teacher states through a gated cross-attention (the
    formulas are the module's docstring).

    Args:
        d_student: the student's width d_s.
        d_teacher: the teacher's width d_t.
        n_heads: attention heads; must divide d_student.
        dropout: attention dropout while training.
        adapter_bottleneck: the width of the adapter after the attention.
    """

    def __init__(self, d_student: int, d_teacher: int, n_heads: int = 8, *, dropout: float = 0.1,
                 adapter_bottleneck: int = 256):
        super().__init__()
        if d_student % n_heads:
            raise ValueError(f"n_heads={n_heads} does not divide the student width {d_student}")
        self.n_heads, self.dropout = n_heads, dropout
        self.student_norm = nn.LayerNorm(d_student)
        self.teacher_norm = nn.LayerNorm(d_teacher)
        self.q_proj = nn.Linear(d_student, d_student)
        self.k_proj = nn.Linear(d_teacher, d_student)
        self.v_proj = nn.Linear(d_teacher, d_student)
        self.o_proj = nn.Linear(d_student, d_student)
        self.adapter_in = nn.Linear(d_student, adapter_bottleneck)
        self.adapter_out = nn.Linear(adapter_bottleneck, d_student)
        self.adapter_norm = nn.LayerNorm(d_student)
        self.gate = nn.Linear(2 * d_student, d_student)
        self.gate_value = HookPoint()

    def forward(self, h: torch.Tensor, teacher: torch.Tensor, visible: torch.Tensor) -> torch.Tensor:
        """h (B, S, d_s), teacher (B, U, d_t), visible (B, S) int64 (position i reads teacher
        states 0 .. visible[b, i] - 1) or (B, S, U) bool (which states it reads) -> (B, S, d_s)."""
        B, S, d = h.shape
        U = teacher.shape[1]
        heads = lambda x: x.view(B, -1, self.n_heads, d // self.n_heads).transpose(1, 2)  # noqa: E731
        q = heads(self.q_proj(self.student_norm(h)))
        t = self.teacher_norm(teacher)
        k, v = heads(self.k_proj(t)), heads(self.v_proj(t))
        if visible.dtype == torch.bool:
            allowed = visible
        else:
            allowed = torch.arange(U, device=h.device)[None, None, :] < visible[:, :, None]  # (B, S, U)
        empty = ~allowed.any(-1, keepdim=True)  # (B, S, 1): nothing to read yet
        # An all-masked row would give NaN from the softmax: let it read everything, then zero it.
        mask = (allowed | empty)[:, None]  # (B, 1, S, U), broadcast over heads
        a = F.scaled_dot_product_attention(q, k, v, attn_mask=mask,
                                           dropout_p=self.dropout if self.training else 0.0)
        a = self.o_proj(a.transpose(1, 2).reshape(B, S, d)).masked_fill(empty, 0.0)
        a = a + self.adapter_norm(self.adapter_out(F.gelu(self.adapter_in(a))))
        g = self.gate_value(torch.sigmoid(self.gate(torch.cat([h, a], dim=-1))))
        return g * a + (1 - g) * h
