"""Repeated random tokens (`repeat`): the task induction heads are built for.

A copy of L distinct random tokens, then the same copy again, then padding 0 to length
2 * max_len; L is drawn per sequence from [min_len, max_len]. Only the second copy is
scored from its second token on: the next token there is the one that followed the current
token in the first copy, which an induction head finds (attend to the position after the
earlier occurrence, copy its token). This is the sequence TransformerLens scores induction
heads on, so `train.induction_scores` reads the heads on the very pattern the model is
trained on.

A model without induction can still do better than chance per token: a copy's tokens are
distinct, so the next one is among the first copy's tokens not yet repeated. Guessing
uniformly among those is right with probability 1/(L - j) at the j-th scored token, on
average H_{L-1}/(L-1) per token (0.61 at L = 4, 0.22 at L = 16); `token_accuracy` must be
read against that. The whole second copy (`accuracy`, exact match) is guessed so only with
probability 1/(L-1)!, so exact match needs the copy followed.

Worked example, vocabulary 512, L = 3 of max_len 4::

    17 305 42 17 305 42  0  0
    first copy  second   pad

The model reads the first 7 tokens; the targets at positions 3 and 4 (tokens 17 and 305 of
the second copy) are 305 and 42 and are scored; position 2's target (17, the copy's start)
is not predictable and is not scored. Slices: `copy_length`, L.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from ..configtools import option
from ..errors import ConfigError
from ..registry import TASKS
from .base import IGNORE, Batch, Task, TaskConfig


@dataclass
class RepeatConfig(TaskConfig):
    vocab_size: int = option(512, "vocabulary; tokens 1..vocab_size-1 are drawn, 0 pads")
    min_len: int = option(4, "the shortest copy")
    max_len: int = option(16, "the longest copy; sequences are 2 * max_len long")

    def __post_init__(self) -> None:
        super().__post_init__()
        if not 2 <= self.min_len <= self.max_len:
            raise ConfigError(f"task.min_len and task.max_len must satisfy 2 <= min_len <= max_len, "
                              f"got {self.min_len} and {self.max_len}")
        if self.vocab_size - 1 < self.max_len:
            raise ConfigError(f"task.vocab_size={self.vocab_size} leaves fewer than task.max_len={self.max_len} "
                              f"distinct tokens for a copy")
        self.check_room(math.perm(self.vocab_size - 1, self.min_len), f"task.min_len={self.min_len}")


@TASKS.register("repeat")
class Repeat(Task):
    Config = RepeatConfig

    def __init__(self, cfg: RepeatConfig):
        super().__init__(cfg)
        self.vocab_size = cfg.vocab_size
        self.seq_len = 2 * cfg.max_len - 1

    def sample(self, rng: np.random.Generator, count: int) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        cfg = self.cfg
        lengths = rng.integers(cfg.min_len, cfg.max_len + 1, size=count)
        # An ordered sample of distinct tokens per row: the first max_len of a random permutation.
        copies = np.argsort(rng.random((count, cfg.vocab_size - 1)), axis=1)[:, :cfg.max_len] + 1
        seqs = np.zeros((count, 2 * cfg.max_len), dtype=np.int64)
        columns = np.arange(cfg.max_len)[None, :]
        inside = columns < lengths[:, None]
        rows = np.repeat(np.arange(count), cfg.max_len).reshape(count, cfg.max_len)
        seqs[:, :cfg.max_len] = np.where(inside, copies, 0)
        second = lengths[:, None] + columns  # where each token of the copy goes again
        seqs[rows[inside], second[inside]] = copies[inside]
        return seqs, {"copy_length": lengths}

    def to_batch(self, seqs: np.ndarray, slices: dict[str, np.ndarray]) -> Batch:
        """Score input positions L .. 2L - 2: the second copy's tokens but its last, whose next
        token is padding."""
        seqs_t = torch.from_numpy(np.ascontiguousarray(seqs, dtype=np.int64))
        inputs, targets = seqs_t[:, :-1], seqs_t[:, 1:].clone()
        lengths = torch.from_numpy(np.asarray(slices["copy_length"], dtype=np.int64))[:, None]
        position = torch.arange(inputs.shape[1])[None, :]
        targets[(position < lengths) | (position > 2 * lengths - 2)] = IGNORE
        return Batch.from_numpy(inputs, targets, slices)
