"""How one text becomes the student's tokens, the teacher's tokens, and which teacher
states each student position may read.

- `SharedTokenizer`: the student reads with the teacher's tokenizer; teacher position j
  holds the text up to student token j, so the alignment is the identity.
- `TwoTokenizers`: each model tokenizes the same text with its own tokenizer, and teacher
  states are aligned to student positions by character offsets (`offset_visibility`): a
  student position reads the teacher states of text that ends at or before its own token
  ends, never a teacher token that has seen a character past it. Worked example, text
  "the cat", student tokens "the" | " cat", teacher tokens "th" | "e c" | "at": the
  student's "the" reads ["th"], its " cat" reads all three.

Both work on text the student has generated too (`extend`): the grown text is tokenized
again by the teacher's tokenizer, whose split of the tail may change as text arrives,
while the student's own tokens stay as generated.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .alignment import offset_visibility


@dataclass
class Encoded:
    student: list[int]  # (S,) student tokenizer ids
    teacher: list[int]  # (U,) teacher tokenizer ids
    visible: list[int]  # (S,) teacher states student position i may read (a prefix count)


class SharedTokenizer:
    """The teacher's tokenizer (a Hugging Face tokenizer) for both models."""

    shared = True

    def __init__(self, tokenizer):
        self.student = self.teacher = tokenizer

    def encode(self, text: str) -> Encoded:
        ids = self.teacher(text).input_ids
        return Encoded(ids, ids, list(range(1, len(ids) + 1)))

    def student_ids(self, text: str) -> list[int]:
        return self.teacher(text).input_ids

    def cut(self, text: str, max_tokens: int) -> Encoded:
        """The text's first `max_tokens` tokens."""
        ids = self.teacher(text).input_ids[:max_tokens]
        return Encoded(ids, ids, list(range(1, len(ids) + 1)))

    def decode(self, ids: list[int]) -> str:
        return self.teacher.decode(ids, skip_special_tokens=True)

    def extend(self, prompt: str, prompt_ids: list[int], new_ids: list[int]) -> Encoded:
        ids = [*prompt_ids, *new_ids]
        return Encoded(ids, ids, list(range(1, len(ids) + 1)))


class TwoTokenizers:
    """The student's own tokenizer beside the teacher's, aligned by character offsets. Both
    are `tokenizers.Tokenizer` objects (a Hugging Face fast tokenizer's `backend_tokenizer`);
    each adds the special tokens it was made with (their offsets (0, 0) make them visible
    with the text before them)."""

    shared = False

    def __init__(self, student, teacher):
        self.student, self.teacher = student, teacher

    def encode(self, text: str) -> Encoded:
        s, t = self.student.encode(text), self.teacher.encode(text)
        visible = offset_visibility([s.offsets], [t.offsets], len(s.ids))[0]
        return Encoded(list(s.ids), list(t.ids), visible.tolist())

    def student_ids(self, text: str) -> list[int]:
        return list(self.student.encode(text).ids)

    def cut(self, text: str, max_tokens: int) -> Encoded:
        """The text up to the end of its `max_tokens`-th student token."""
        s = self.student.encode(text)
        if len(s.ids) > max_tokens:
            text = text[:max(end for _, end in s.offsets[:max_tokens])]
        return self.encode(text)

    def decode(self, ids: list[int]) -> str:
        return self.student.decode(ids, skip_special_tokens=True)

    def extend(self, prompt: str, prompt_ids: list[int], new_ids: list[int]) -> Encoded:
        """The prompt (tokenized as `prompt_ids`) followed by generated student tokens: the
        teacher tokenizes the whole text again; generated token k ends where the text of the
        first k + 1 of them ends. That text is decoded after the prompt's tokens, since some
        decoders (SentencePiece's) drop a leading space of a sequence decoded alone."""
        prompt_ends = [end for _, end in self.student.encode(prompt).offsets]
        if len(prompt_ends) != len(prompt_ids):
            raise ValueError("the prompt ids are not the student tokenizer's split of the prompt")
        base = self.decode(prompt_ids)
        grown = [self.decode([*prompt_ids, *new_ids[:k + 1]]) for k in range(len(new_ids))]
        tails = [g[len(base):] if g.startswith(base) else self.decode(new_ids[:k + 1]) for k, g in enumerate(grown)]
        ends = prompt_ends + [len(prompt) + len(t) for t in tails]
        text = prompt + (tails[-1] if tails else "")
        t = self.teacher.encode(text)
        visible = offset_visibility([[(0, e) for e in ends]], [t.offsets], len(ends))[0]
        return Encoded([*prompt_ids, *new_ids], list(t.ids), visible.tolist())


def leaky(encoded: Encoded) -> list[int]:
    """The reference's visibility: every position reads every teacher state of the text."""
    return [len(encoded.teacher)] * len(encoded.student)


def as_tensor(rows: list[list[int]], fill: int = 0) -> torch.Tensor:
    """Right-padded (B, max length) int64."""
    out = torch.full((len(rows), max(len(r) for r in rows)), fill, dtype=torch.long)
    for b, row in enumerate(rows):
        out[b, :len(row)] = torch.tensor(row, dtype=torch.long)
    return out
