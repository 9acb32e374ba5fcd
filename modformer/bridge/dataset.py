"""Texts as token rows, the student's vocabulary, teacher states, and training batches.

The student reads with the teacher's tokenizer, so a teacher state at position j is the
state of the text up to the student's token j (alignment is the identity; see `alignment`
for two tokenizers). Its vocabulary is the part of the teacher's that the experiment's
texts use, every fact's answer included (a student cannot emit a token it has no output
row for); ids are mapped between the two by `vocab` and `to_student`.

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
from .texts import Item


@dataclass
class Rows:
    ids: list[torch.Tensor]  # per row: (length,) teacher token ids
    answer_start: list[int]  # per row: first scored position of the answer (1 for corpus texts: all of it)
    first: int  # index of the first of these rows in the teacher-state cache
    items: list[Item] | None = None  # the task items (None for the corpus)

    def __len__(self) -> int:
        return len(self.ids)


def encode_items(tokenizer, items: list[Item], first: int) -> Rows:
    """Each item's text as teacher token ids; its answer starts where its prompt's tokens end."""
    ids, starts = [], []
    for item in items:
        prompt = tokenizer(item.prompt).input_ids
        full = tokenizer(item.text).input_ids
        if full[:len(prompt)] != prompt or len(full) == len(prompt):
            raise ModformerError(f"the tokenizer does not split {item.text!r} at the end of its prompt "
                                 f"{item.prompt!r}: its answer cannot be scored on its own")
        ids.append(torch.tensor(full))
        starts.append(len(prompt))
    return Rows(ids, starts, first, items)


def encode_corpus(tokenizer, texts: list[str], max_tokens: int, first: int) -> Rows:
    ids = [torch.tensor(tokenizer(t).input_ids[:max_tokens]) for t in texts]
    ids = [row for row in ids if len(row) >= 2]  # a one-token text has no next token to score
    return Rows(ids, [1] * len(ids), first)


@dataclass
class Batch:
    ids: torch.Tensor  # (B, S) student token ids, right-padded with 0
    targets: torch.Tensor  # (B, S) next student token where scored, else IGNORE
    lengths: torch.Tensor  # (B,) real tokens per row (= teacher states per row)
    rows: list[int]  # cache rows


class ModulesData:
    """The train, corpus and held-out rows, the student vocabulary and the teacher states."""

    def __init__(self, train: Rows, corpus: Rows | None, held: Rows, extra_tokens: list[torch.Tensor],
                 loss_on: str):
        self.train, self.corpus, self.held, self.loss_on = train, corpus, held, loss_on
        groups = [train, held] + ([corpus] if corpus is not None else [])
        self.vocab = torch.unique(torch.cat([r for g in groups for r in g.ids] + extra_tokens))
        self.to_student = torch.full((int(self.vocab.max()) + 1,), -1, dtype=torch.long)
        self.to_student[self.vocab] = torch.arange(len(self.vocab))
        self.cache: TeacherStateCache | None = None
        self.final_cache: TeacherStateCache | None = None  # final-layer states, for distillation

    @property
    def all_rows(self) -> list[torch.Tensor]:
        return [*self.train.ids, *(self.corpus.ids if self.corpus else []), *self.held.ids]

    @property
    def longest(self) -> int:
        return max(len(r) for r in self.all_rows)

    def student_ids(self, teacher_ids: torch.Tensor) -> torch.Tensor:
        return self.to_student[teacher_ids]

    def teacher_ids(self, student_ids: torch.Tensor) -> torch.Tensor:
        return self.vocab[student_ids]

    def batch(self, group: Rows, indices: list[int], *, answer_only: bool) -> Batch:
        """Rows `indices` of `group`, scored on the answer only or on every next token."""
        rows = [group.ids[i] for i in indices]
        width = max(len(r) for r in rows)
        ids = torch.zeros(len(rows), width, dtype=torch.long)
        targets = torch.full((len(rows), width), IGNORE, dtype=torch.long)
        for b, (i, row) in enumerate(zip(indices, rows)):
            ids[b, :len(row)] = self.student_ids(row)
            start = group.answer_start[i] if answer_only else 1
            targets[b, start - 1:len(row) - 1] = ids[b, start:len(row)]
        return Batch(ids, targets, torch.tensor([len(r) for r in rows]), [group.first + i for i in indices])

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
        """(B, S, d_teacher) cached teacher states of the batch's rows (final layer with `final`)."""
        cache = self.final_cache if final else self.cache
        if cache is None:
            raise RuntimeError("the teacher states have not been cached")
        states, _ = cache.get(batch.rows)
        return states[:, :batch.ids.shape[1]]


def concat(parts: list[Batch]) -> Batch:
    width = max(p.ids.shape[1] for p in parts)
    pad = lambda t, value: torch.nn.functional.pad(t, (0, width - t.shape[1]), value=value)  # noqa: E731
    return Batch(torch.cat([pad(p.ids, 0) for p in parts]), torch.cat([pad(p.targets, IGNORE) for p in parts]),
                 torch.cat([p.lengths for p in parts]), [r for p in parts for r in p.rows])
