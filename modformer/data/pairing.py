"""How one text becomes the student's tokens, the teacher's tokens, and which teacher
states each student position may read.

- `SharedTokenizer`: the student reads with the teacher's tokenizer; teacher position j
  holds the text up to student token j, so the alignment is the identity.
- `TwoTokenizers`: each model tokenizes the text with its own tokenizer. Student position
  i, whose token ends at character e_i, reads exactly the teacher's states of the text up
  to e_i as the teacher itself would tokenize that text alone: `teacher.encode(text[:e_i])`.
  Character offsets alone would not do: where the teacher splits a word depends on the
  letters after the split, so which of the whole text's teacher tokens end before e_i
  tells the student something about the text after it ("Pa|ris" against "Pa|blo").
  Most of those states are the whole text's (a causal teacher's states of a shared prefix
  of ids are the same): position i reads the first `visible[i]` of the whole text's
  teacher tokens, the longest prefix its own tokenization shares with it, and then its
  `tail`, the few tokens where the two differ, whose states are computed in their own
  context. Worked example, text "the cat", student tokens "the" | " cat", teacher tokens
  "the" | " c" | "at" for the text, "the" | " cat" for nothing shorter:

      student "the"  (e=3): teacher.encode("the")      = ["the"]           visible 1, tail []
      student " cat" (e=7): teacher.encode("the cat")  = ["the", " c", "at"]  visible 3, tail []

  and with a student split "the" | " c" | "a" | "t" the position of " c" reads the
  teacher's "the" plus the tail [" c"], its states taken from teacher.encode("the c").

Both work on text the student has generated too (`extend`): the grown text is aligned the
same way, the student's own tokens kept as generated. The keys a row offers the bridge are
the whole text's teacher states followed by every position's tail (`key_mask` lays them out).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch



@dataclass
class Encoded:
    student: list[int]  # (S,) student tokenizer ids
    teacher: list[int]  # (U,) teacher tokenizer ids of the whole text
    visible: list[int]  # (S,) position i reads teacher[:visible[i]] ...
    tails: list[list[int]] | None = None  # ... and, per position, these teacher ids after them (None: no tails)

    @property
    def keys(self) -> int:
        """States this text offers the bridge: the whole text's, then every tail's."""
        return len(self.teacher) + sum(len(t) for t in self.tails or [])

    def tail_prefixes(self) -> list[tuple[list[int], int]]:
        """(teacher ids of the text up to the position, how many trailing states are its tail)
        for every position with a tail, in position order: the sequences the teacher reads."""
        return [(self.teacher[:v] + t, len(t)) for v, t in zip(self.visible, self.tails or []) if t]


class SharedTokenizer:
    """The teacher's tokenizer (a Hugging Face tokenizer) for both models.

    Args:
        tokenizer (PreTrainedTokenizerBase): the teacher's Hugging Face tokenizer (called as
            `tokenizer(text).input_ids`).
    """

    shared = True

    def __init__(self, tokenizer):
        self.student = self.teacher = tokenizer

    def encode(self, text: str) -> Encoded:
        ids = self.teacher(text).input_ids
        return Encoded(ids, ids, list(range(1, len(ids) + 1)))

    def student_ids(self, text: str) -> list[int]:
        return self.teacher(text).input_ids

    def cut(self, text: str, max_tokens: int) -> Encoded:
        """The text's first `max_tokens` tokens.

        Args:
            text: the text to tokenize.
            max_tokens: the most tokens kept.

        Returns:
            The `Encoded` text: the same ids for student and teacher, position i seeing the
                teacher's first i + 1 states, no tails.
        """
        ids = self.teacher(text).input_ids[:max_tokens]
        return Encoded(ids, ids, list(range(1, len(ids) + 1)))

    def decode(self, ids: list[int]) -> str:
        return self.teacher.decode(ids, skip_special_tokens=True)

    def extend(self, prompt: str, prompt_ids: list[int], new_ids: list[int]) -> Encoded:
        ids = [*prompt_ids, *new_ids]
        return Encoded(ids, ids, list(range(1, len(ids) + 1)))


class TwoTokenizers:
    """The student's own tokenizer beside the teacher's, aligned exactly (see above). Both are
    `tokenizers.Tokenizer` objects (a Hugging Face fast tokenizer's `backend_tokenizer`);
    each adds the special tokens it was made with (a student's leading special token, whose
    offsets are (0, 0), reads the teacher's tokens of the empty text: its own special ones).

    Args:
        student (Tokenizer): the student's `tokenizers.Tokenizer`.
        teacher (Tokenizer): the teacher's `tokenizers.Tokenizer`.
    """

    shared = False

    def __init__(self, student, teacher):
        self.student, self.teacher = student, teacher

    def encode(self, text: str) -> Encoded:
        s = self.student.encode(text)
        return self._align(text, list(s.ids), [end for _, end in s.offsets])

    def _align(self, text: str, student: list[int], ends: list[int]) -> Encoded:
        """Student ids with their tokens' end offsets in `text` -> the exact alignment (above)."""
        whole = list(self.teacher.encode(text).ids)
        visible, tails, seen = [], [], {}
        for end in ends:
            if end not in seen:
                own = list(self.teacher.encode(text[:end]).ids)
                shared = 0
                while shared < min(len(own), len(whole)) and own[shared] == whole[shared]:
                    shared += 1
                seen[end] = (shared, own[shared:])
            visible.append(seen[end][0])
            tails.append(seen[end][1])
        return Encoded(student, whole, visible, tails)

    def student_ids(self, text: str) -> list[int]:
        return list(self.student.encode(text).ids)

    def cut(self, text: str, max_tokens: int) -> Encoded:
        """The text up to the end of its `max_tokens`-th student token.

        Args:
            text: the text to tokenize.
            max_tokens: the most student tokens kept; the text is cut after the last of them.

        Returns:
            The `Encoded` (cut) text: student ids, the whole text's teacher ids, and per
                student position its visible teacher prefix and its tail.
        """
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
        decoders (SentencePiece's) drop a leading space of a sequence decoded alone.

        Args:
            prompt: the prompt's text.
            prompt_ids: the student tokenizer's ids of `prompt` (its own split, else `ValueError`).
            new_ids: the student tokens generated after the prompt.

        Returns:
            The `Encoded` grown text: student ids `prompt_ids + new_ids` as given, the
                teacher's ids of the whole grown text, and each position's visible prefix and tail.
        """
        prompt_ends = [end for _, end in self.student.encode(prompt).offsets]
        if len(prompt_ends) != len(prompt_ids):
            raise ValueError("the prompt ids are not the student tokenizer's split of the prompt")
        base = self.decode(prompt_ids)
        grown = [self.decode([*prompt_ids, *new_ids[:k + 1]]) for k in range(len(new_ids))]
        tails = [g[len(base):] if g.startswith(base) else self.decode(new_ids[:k + 1]) for k, g in enumerate(grown)]
        ends = prompt_ends + [len(prompt) + len(t) for t in tails]
        return self._align(prompt + (tails[-1] if tails else ""), [*prompt_ids, *new_ids], ends)


def key_mask(rows: list[Encoded], leaky: bool = False) -> torch.Tensor:
    """(B, S, K) bool: which of its row's keys (the whole text's teacher states, then every
    position's tail, `Encoded.tail_prefixes` order) each student position reads; padding
    positions read nothing. `leaky`: the reference's bridge, every position reads every
    state of the whole text (tails unused).

    Args:
        rows: the batch's encoded texts, B of them.
        leaky: every position reads every state of its row's whole text.

    Returns:
        The mask (B, S, K) bool, S the longest row's student length and K its largest number
            of keys (`Encoded.keys`).
    """
    widths = [e.keys for e in rows]
    mask = torch.zeros(len(rows), max(len(e.student) for e in rows), max(widths), dtype=torch.bool)
    for b, e in enumerate(rows):
        if leaky:
            mask[b, :len(e.student), :len(e.teacher)] = True
            continue
        start = len(e.teacher)
        for i, v in enumerate(e.visible):
            mask[b, i, :v] = True
            tail = len(e.tails[i]) if e.tails else 0
            mask[b, i, start:start + tail] = True
            start += tail
    return mask


def gather_keys(rows: list[Encoded], whole: torch.Tensor,
                tails: Callable[[int], list[torch.Tensor]]) -> torch.Tensor:
    """The keys of each row in the layout `key_mask` reads, zero-padded: (*, B, K, d) from
    `whole` (*, B, U, d), the states of each row's whole text, and `tails(b)`, the states
    of row b's tails in `Encoded.tail_prefixes` order, (*, n, d) each (* may be a layer axis).

    Args:
        rows: the batch's encoded texts, B of them.
        whole: the teacher states of each row's whole text, (*, B, U, d), U the longest.
        tails: row index b -> the states of row b's tails, one (*, n, d) tensor per tail.

    Returns:
        The keys (*, B, K, d), K the largest `Encoded.keys` of the rows, zero-padded.
    """
    out = whole.new_zeros(*whole.shape[:-3], len(rows), max(e.keys for e in rows), whole.shape[-1])
    for b, e in enumerate(rows):
        keys = torch.cat([whole[..., b, :len(e.teacher), :], *tails(b)], dim=-2)
        out[..., b, :keys.shape[-2], :] = keys
    return out


def as_tensor(rows: list[list[int]], fill: int = 0) -> torch.Tensor:
    """Right-padded (B, max length) int64.

    Args:
        rows: B lists of token ids (at least one row).
        fill: the padding id.

    Returns:
        The ids (B, max length), int64, each row padded on the right with `fill`.
    """
    out = torch.full((len(rows), max(len(r) for r in rows)), fill, dtype=torch.long)
    for b, row in enumerate(rows):
        out[b, :len(row)] = torch.tensor(row, dtype=torch.long)
    return out
