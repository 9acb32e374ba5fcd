"""Which teacher states each student position may read.

A *visibility* tensor `visible` (B, S) int64 says that student position i of row b may read
teacher positions 0 .. visible[b, i] - 1 (the bridge masks the rest). Causal means: the
teacher states of text up to the end of student token i, never of text after it.

- Same tokenizer: teacher position j holds text up to token j, so visible[b, i] = i + 1
  (capped by the teacher's real length). `causal_visibility`.
- Different tokenizers: both tokenize the same text and report character offsets (Hugging
  Face tokenizers' `offset_mapping`). Teacher token j may be read at student position i
  when it ends at or before student token i ends: visible[b, i] = #{j : t_end[j] <= s_end[i]}.
  A teacher token that straddles the end of student token i is not visible yet (it has seen
  characters past i), nor is anything after it; special tokens (offsets (0, 0)) become
  visible with the text before them. `offset_visibility`. Worked example, text "the cat":

      student tokens  "the" (0,3)  " cat" (3,7)
      teacher tokens  "th" (0,2)  "e c" (2,5)  "at" (5,7)
      visible         [1, 3]      ("th" ends at 2 <= 3; "e c" ends at 5 > 3, seen by " cat")

- Leaky (the reference code): every non-padding teacher state, the label's included.
  `leaky_visibility`; kept to measure the leak.

Character offsets bound what a position may read, but over one tokenization of the whole
text they are not quite causal: where the teacher splits a word depends on the letters
after the split, so *which* teacher tokens have ended tells a position something about
the text after it. `modformer llm-modules` therefore aligns two tokenizers exactly
(`pairing.TwoTokenizers`: each position reads the teacher's states of its own text as the
teacher would tokenize it), which never reads more than `offset_visibility` allows.
"""

from __future__ import annotations

from typing import Sequence

import torch


def causal_visibility(student_len: int, teacher_lengths: torch.Tensor) -> torch.Tensor:
    """Shared tokenizer: (B,) teacher lengths -> (B, S) with visible[b, i] = min(i + 1, length_b).

    Args:
        student_len: the student's sequence length S.
        teacher_lengths: each row's number of real (non-padding) teacher states, (B,).

    Returns:
        The visibility (B, S), int64, on `teacher_lengths`' device.
    """
    positions = torch.arange(1, student_len + 1, device=teacher_lengths.device)
    return torch.minimum(positions[None, :], teacher_lengths[:, None]).long()


def leaky_visibility(student_len: int, teacher_lengths: torch.Tensor) -> torch.Tensor:
    """The reference's bridge: every position sees all of the teacher's (non-padding) states.

    Args:
        student_len: the student's sequence length S.
        teacher_lengths: each row's number of real (non-padding) teacher states, (B,).

    Returns:
        The visibility (B, S), int64, visible[b, i] = length_b for every position i.
    """
    return teacher_lengths[:, None].expand(-1, student_len).long().clone()


def offset_visibility(student_offsets: Sequence[Sequence[tuple[int, int]]],
                      teacher_offsets: Sequence[Sequence[tuple[int, int]]], student_len: int) -> torch.Tensor:
    """Two tokenizers over the same texts: per row, (start, end) character offsets of each
    student and teacher token -> (B, student_len) visibility (positions past a row's tokens
    get that row's full count; they are padding and their outputs are not used).

    Args:
        student_offsets: per row, the (start, end) character offsets of each student token
            (at most `student_len` of them).
        teacher_offsets: per row, the (start, end) character offsets of each teacher token of
            the same text; special tokens report (0, 0).
        student_len: the student's (padded) sequence length S.

    Returns:
        The visibility (B, S), int64 on the CPU: visible[b, i] counts the teacher tokens of row
            b that end (with every token before them) at or before student token i ends.
    """
    if len(student_offsets) != len(teacher_offsets):
        raise ValueError(f"{len(student_offsets)} student rows but {len(teacher_offsets)} teacher rows")
    out = torch.zeros(len(student_offsets), student_len, dtype=torch.long)
    for b, (s_row, t_row) in enumerate(zip(student_offsets, teacher_offsets)):
        if len(s_row) > student_len:
            raise ValueError(f"row {b} has {len(s_row)} student tokens, more than student_len={student_len}")
        # The mask shows a prefix of teacher positions, so count the prefix: a teacher position
        # is visible once every position up to it has ended. Special tokens and padding report
        # (0, 0); a later one would otherwise count as "ended" and open the window early.
        ends = [end for _, end in t_row]
        reach = torch.tensor(ends, dtype=torch.long).cummax(0).values if ends else torch.zeros(0, dtype=torch.long)
        s_ends = torch.tensor([end for _, end in s_row], dtype=torch.long)
        out[b, :len(s_row)] = torch.searchsorted(reach, s_ends, right=True)
        out[b, len(s_row):] = len(t_row)
    return out
