"""Texts as token rows, the student's vocabulary, teacher states, and training batches.

Each text is tokenized by the student's and the teacher's tokenizers (`pairing`): a row
holds both token lists and, per student position, how many teacher states it may read.
With the teacher's tokenizer the two lists are one and the student's vocabulary is the
part of the teacher's that the experiment's texts use, every fact's answer included (a
student cannot emit a token it has no output row for); with its own tokenizer it is all
of that tokenizer. `Vocabulary` maps tokenizer ids to the student's rows and back.

Row groups, in cache order: the task's training items, the corpus, the held-out items.
A batch for (seed, step) is a pure function of both: every arm of a seed sees the same
batches in the same order.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from ..errors import ModformerError
from ..tasks.base import IGNORE
from .cache import TeacherStateCache
from .pairing import Encoded, as_tensor
from .texts import Item


@dataclass
class Rows:
    ids: list[list[int]]  # per row: (S,) student tokenizer ids
    teacher_ids: list[list[int]]  # per row: (U,) teacher tokenizer ids (what the teacher-state cache holds)
    visible: list[list[int]]  # per row: (S,) teacher states each student position may read (causal)
    answer_start: list[int]  # per row: first scored student position of the answer (1 for corpus texts: all)
    first: int  # index of the first of these rows in the teacher-state cache
    items: list[Item] | None = None  # the task items (None for the corpus)

    def __len__(self) -> int:
        return len(self.ids)


def _rows(encoded: list[Encoded], starts: list[int], first: int, items: list[Item] | None = None) -> Rows:
    return Rows([e.student for e in encoded], [e.teacher for e in encoded], [e.visible for e in encoded], starts,
                first, items)


def encode_items(pairing, items: list[Item], first: int) -> Rows:
    """Each item's text tokenized for both models; its answer starts where its prompt's student tokens end."""
    encoded, starts = [], []
    for item in items:
        prompt = pairing.student_ids(item.prompt)
        enc = pairing.encode(item.text)
        if enc.student[:len(prompt)] != prompt or len(enc.student) == len(prompt):
            raise ModformerError(f"the student's tokenizer does not split {item.text!r} at the end of its prompt "
                                 f"{item.prompt!r}: its answer cannot be scored on its own")
        encoded.append(enc)
        starts.append(len(prompt))
    return _rows(encoded, starts, first, items)


def encode_corpus(pairing, texts: list[str], max_tokens: int, first: int) -> Rows:
    """Each text cut to its first `max_tokens` student tokens; one-token texts (nothing to predict) dropped."""
    encoded = [e for e in (pairing.cut(t, max_tokens) for t in texts) if len(e.student) >= 2]
    return _rows(encoded, [1] * len(encoded), first)


class Vocabulary:
    """The student's output rows <-> its tokenizer's ids: a subset of the teacher's vocabulary
    (`subset`, when the student reads with the teacher's tokenizer) or a whole vocabulary."""

    def __init__(self, ids: torch.Tensor | None, size: int):
        self.ids, self.size = ids, size  # ids: (size,) tokenizer id of each row, None for the identity
        if ids is not None:
            self.rows = torch.full((int(ids.max()) + 1,), -1, dtype=torch.long)
            self.rows[ids] = torch.arange(len(ids))

    @classmethod
    def subset(cls, ids: torch.Tensor) -> "Vocabulary":
        ids = torch.unique(ids)
        return cls(ids, len(ids))

    @classmethod
    def whole(cls, size: int) -> "Vocabulary":
        return cls(None, size)

    def to_model(self, ids: torch.Tensor) -> torch.Tensor:
        return ids if self.ids is None else self.rows[ids]

    def to_tokenizer(self, rows: torch.Tensor) -> torch.Tensor:
        return rows if self.ids is None else self.ids[rows]


@dataclass
class Batch:
    ids: torch.Tensor  # (B, S) student rows, right-padded with 0
    targets: torch.Tensor  # (B, S) next student row where scored, else IGNORE
    visible: torch.Tensor  # (B, S) causal visibility of teacher states
    teacher_lengths: torch.Tensor  # (B,) teacher states per row
    rows: list[int]  # cache rows

    def visibility(self, leaky: bool) -> torch.Tensor:
        """(B, S): causal, or every teacher state of the row (the reference's leak)."""
        return self.teacher_lengths[:, None].expand_as(self.ids).clone() if leaky else self.visible


class ModulesData:
    """The train, corpus and held-out rows, the student vocabulary and the teacher states."""

    def __init__(self, train: Rows, corpus: Rows | None, held: Rows, vocab: Vocabulary, loss_on: str):
        self.train, self.corpus, self.held, self.vocab, self.loss_on = train, corpus, held, vocab, loss_on
        self.cache: TeacherStateCache | None = None
        self.final_cache: TeacherStateCache | None = None  # final-layer states, for distillation

    @property
    def groups(self) -> list[Rows]:
        """In cache order."""
        return [self.train, *([self.corpus] if self.corpus else []), self.held]

    @property
    def teacher_rows(self) -> list[torch.Tensor]:
        """Every row's teacher ids, in cache order."""
        return [torch.tensor(r, dtype=torch.long) for g in self.groups for r in g.teacher_ids]

    @property
    def longest(self) -> int:
        """Student tokens of the longest row."""
        return max(len(r) for g in self.groups for r in g.ids)

    @property
    def longest_teacher(self) -> int:
        return max(len(r) for g in self.groups for r in g.teacher_ids)

    def batch(self, group: Rows, indices: list[int], *, answer_only: bool) -> Batch:
        """Rows `indices` of `group`, scored on the answer only or on every next token."""
        ids = as_tensor([self.vocab.to_model(torch.tensor(group.ids[i])).tolist() for i in indices])
        lengths = [len(group.ids[i]) for i in indices]
        targets = torch.full_like(ids, IGNORE)
        for b, (i, length) in enumerate(zip(indices, lengths)):
            start = group.answer_start[i] if answer_only else 1
            targets[b, start - 1:length - 1] = ids[b, start:length]
        return Batch(ids, targets, as_tensor([group.visible[i] for i in indices]),
                     torch.tensor([len(group.teacher_ids[i]) for i in indices]), [group.first + i for i in indices])

    def train_batch(self, seed: int, step: int, size: int, task_fraction: float) -> Batch:
        """Training batch `step` of seed `seed`: a share `task_fraction` of task items, the rest corpus."""
        rng = np.random.default_rng([seed, step])
        n_task = size if self.corpus is None else max(1, round(task_fraction * size))
        parts = [self.batch(self.train, rng.integers(0, len(self.train), n_task).tolist(),
                            answer_only=self.loss_on == "answer")]
        if n_task < size:
            parts.append(self.batch(self.corpus, rng.integers(0, len(self.corpus), size - n_task).tolist(),
                                    answer_only=False))
        return concat(parts)

    def states(self, batch: Batch, final: bool = False) -> torch.Tensor:
        """(B, U, d_teacher) cached teacher states of the batch's rows (final layer with `final`)."""
        cache = self.final_cache if final else self.cache
        if cache is None:
            raise RuntimeError("the teacher states have not been cached")
        return cache.get(batch.rows)[0]


def concat(parts: list[Batch]) -> Batch:
    width = max(p.ids.shape[1] for p in parts)
    pad = lambda t, value: torch.nn.functional.pad(t, (0, width - t.shape[1]), value=value)  # noqa: E731
    return Batch(torch.cat([pad(p.ids, 0) for p in parts]), torch.cat([pad(p.targets, IGNORE) for p in parts]),
                 torch.cat([pad(p.visible, 0) for p in parts]), torch.cat([p.teacher_lengths for p in parts]),
                 [r for p in parts for r in p.rows])
