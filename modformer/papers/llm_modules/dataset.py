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

from ...errors import ModformerError
from ...tasks.base import IGNORE
from ...interop.teacher_cache import TeacherStateCache
from ...data.pairing import Encoded, as_tensor, gather_keys, key_mask
from .texts import Item


@dataclass
class Rows:
    texts: list[Encoded]  # per row: student and teacher ids and which teacher states each position reads
    answer_start: list[int]  # per row: first scored student position of the answer (1 for corpus texts: all)
    first: int  # index of the first of these rows in the teacher-state cache
    items: list[Item] | None = None  # the task items (None for the corpus)

    def __len__(self) -> int:
        return len(self.texts)

    @property
    def ids(self) -> list[list[int]]:
        """Per row: (S,) student tokenizer ids."""
        return [e.student for e in self.texts]

    @property
    def teacher_ids(self) -> list[list[int]]:
        """Per row: (U,) teacher ids of the whole text (what the teacher-state cache holds)."""
        return [e.teacher for e in self.texts]


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
    return Rows(encoded, starts, first, items)


def encode_corpus(pairing, texts: list[str], max_tokens: int, first: int) -> Rows:
    """Each text cut to its first `max_tokens` student tokens; one-token texts (nothing to predict) dropped."""
    encoded = [e for e in (pairing.cut(t, max_tokens) for t in texts) if len(e.student) >= 2]
    return Rows(encoded, [1] * len(encoded), first)


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
    texts: list[Encoded]  # per row: its alignment with the teacher
    rows: list[int]  # cache rows

    def visibility(self, leaky: bool) -> torch.Tensor:
        """(B, S, K) bool: the keys each position reads, causal or (`leaky`) the reference's
        every state of the whole text (`pairing.key_mask`)."""
        return key_mask(self.texts, leaky)

    @property
    def keys(self) -> int:
        """K: teacher states of the widest row, tails included."""
        return max(e.keys for e in self.texts)


class LLMModulesData:
    """The train, corpus and held-out rows, the student vocabulary and the teacher states."""

    def __init__(self, train: Rows, corpus: Rows | None, held: Rows, vocab: Vocabulary, loss_on: str):
        self.train, self.corpus, self.held, self.vocab, self.loss_on = train, corpus, held, vocab, loss_on
        self.caches: dict[int, TeacherStateCache] = {}  # teacher layer -> its states of `sequences`
        # The cache holds every row's whole-text states, then the tails' (two tokenizers only).
        texts = [e for g in self.groups for e in g.texts]
        self.tail_rows: dict[int, list[int]] = {}
        self.sequences: list[tuple[list[int], int | None]] = [(e.teacher, None) for e in texts]
        for row, e in enumerate(texts):
            for prefix, keep in e.tail_prefixes():
                self.tail_rows.setdefault(row, []).append(len(self.sequences))
                self.sequences.append((prefix, keep))

    @property
    def groups(self) -> list[Rows]:
        """In cache order."""
        return [self.train, *([self.corpus] if self.corpus else []), self.held]

    @property
    def longest(self) -> int:
        """Student tokens of the longest row."""
        return max(len(r) for g in self.groups for r in g.ids)

    @property
    def most_keys(self) -> int:
        """Keys (teacher states, tails included) of the row with most."""
        return max(e.keys for g in self.groups for e in g.texts)

    def batch(self, group: Rows, indices: list[int], *, answer_only: bool) -> Batch:
        """Rows `indices` of `group`, scored on the answer only or on every next token."""
        ids = as_tensor([self.vocab.to_model(torch.tensor(group.texts[i].student)).tolist() for i in indices])
        lengths = [len(group.texts[i].student) for i in indices]
        targets = torch.full_like(ids, IGNORE)
        for b, (i, length) in enumerate(zip(indices, lengths)):
            start = group.answer_start[i] if answer_only else 1
            targets[b, start - 1:length - 1] = ids[b, start:length]
        return Batch(ids, targets, [group.texts[i] for i in indices], [group.first + i for i in indices])

    def task_rows(self, size: int, task_fraction: float) -> int:
        """Task items in a training batch of `size` rows: all of them without a corpus, else the
        share `task_fraction` (at least one)."""
        return size if self.corpus is None else max(1, round(task_fraction * size))

    def train_batch(self, seed: int, step: int, size: int, task_fraction: float) -> Batch:
        """Training batch `step` of seed `seed`: a share `task_fraction` of task items, the rest corpus."""
        rng = np.random.default_rng([seed, step])
        n_task = self.task_rows(size, task_fraction)
        parts = [self.batch(self.train, rng.integers(0, len(self.train), n_task).tolist(),
                            answer_only=self.loss_on == "answer")]
        if n_task < size:
            parts.append(self.batch(self.corpus, rng.integers(0, len(self.corpus), size - n_task).tolist(),
                                    answer_only=False))
        return concat(parts)

    def states(self, batch: Batch, layer: int) -> torch.Tensor:
        """(B, K, d_teacher) cached keys of the batch's rows from teacher layer `layer`: each
        row's whole-text states, then its tails' (the layout `pairing.key_mask` reads)."""
        if layer not in self.caches:
            raise RuntimeError(f"the teacher states of layer {layer} have not been cached")
        cache = self.caches[layer]
        whole = cache.get(batch.rows)[0]

        def tails(b: int) -> list[torch.Tensor]:
            if batch.rows[b] not in self.tail_rows:
                return []
            states, lengths = cache.get(self.tail_rows[batch.rows[b]])
            return [t[:n] for t, n in zip(states, lengths.tolist())]
        return gather_keys(batch.texts, whole, tails)


def concat(parts: list[Batch]) -> Batch:
    width = max(p.ids.shape[1] for p in parts)
    pad = lambda t, value: torch.nn.functional.pad(t, (0, width - t.shape[1]), value=value)  # noqa: E731
    return Batch(torch.cat([pad(p.ids, 0) for p in parts]), torch.cat([pad(p.targets, IGNORE) for p in parts]),
                 [e for p in parts for e in p.texts], [r for p in parts for r in p.rows])
