"""A task of our own: copy a random string after a separator (`task.name:
examples.tasks.copy:Copy`). The worked example of docs/own-task.md.

Format, vocabulary `vocab_size` (default 64): a string of 1..`max_length` tokens drawn from
2..vocab_size-1, the separator 1, the same string again, padding 0 to a fixed length. Only
the copy is scored (each of its tokens, predicted at the position before it); an example is
correct when every copied token is. Worked example, max_length 4, the string 7 3 9::

    inputs    7  3  9  1  7  3  9  0  0
    targets   .  .  .  7  3  9  .  .  .     (. : not scored)

Slices: `length`, the string's length. The held-out sets (validation and test) come from the
base class: drawn from `task.test_seed`, disjoint, never emitted by the training stream;
`check_room` refuses held-out sets too large for the task's space of strings.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from modformer.configtools import option
from modformer.errors import ConfigError
from modformer.tasks.base import Task, TaskConfig

SEPARATOR, PAD = 1, 0


@dataclass
class CopyConfig(TaskConfig):
    max_length: int = option(8, "the longest string to copy; each example's length is drawn from 1..max_length")
    vocab_size: int = option(64, "vocabulary: padding 0, the separator 1, string tokens 2..vocab_size-1")

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.max_length < 1 or self.vocab_size < 3:
            raise ConfigError(f"task.max_length must be >= 1 and task.vocab_size >= 3, got {self.max_length} "
                              f"and {self.vocab_size}")
        symbols = self.vocab_size - 2
        self.check_room(sum(symbols ** n for n in range(1, self.max_length + 1)), f"task.max_length={self.max_length}")


class Copy(Task):
    Config = CopyConfig

    def __init__(self, cfg: CopyConfig):
        super().__init__(cfg)
        self.vocab_size = cfg.vocab_size
        self.seq_len = 2 * cfg.max_length + 1  # the model's inputs: the row but its last token

    def sample(self, rng: np.random.Generator, count: int) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """(count, seq_len + 1) rows and their `length` slice, from `rng` alone."""
        L = self.cfg.max_length
        lengths = rng.integers(1, L + 1, size=count)
        strings = rng.integers(2, self.vocab_size, size=(count, L))
        seqs = np.full((count, 2 * L + 2), PAD, dtype=np.int64)
        for i, n in enumerate(lengths):
            seqs[i, :n] = strings[i, :n]
            seqs[i, n] = SEPARATOR
            seqs[i, n + 1:2 * n + 1] = strings[i, :n]
        return seqs, {"length": lengths}

    def target_mask(self, inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """(B, T) bool: the targets after the separator that are not padding (the copy)."""
        after = torch.cumsum(inputs == SEPARATOR, dim=1) > 0
        return after & (targets != PAD)
