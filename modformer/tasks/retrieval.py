"""Retrieval, the task `retrieval` (`task.n_pairs: N`; "retrieval_N" in the results is
shorthand for that setting, not a task name): find the value stored under a queried key.
Its former name, `condattend` (the reference's, `task_condattendstream.py`), is in older
records only: `modformer migrate` renames it there; reports written before say `condattend`.

Format (the random-attention paper's reference format, vocabulary 512):

- 1..N key-value pairs with distinct keys k in 0..N-1, written as key token k + 256 and a
  value token in 1..255;
- then the query token q + N + 256 (an id of its own, not the key token) for one of the
  keys q present;
- then the answer, the value stored under q; padding 0 to length 2N + 3.

Only the answer is scored: the prediction at the query position. Worked example, N = 3,
two pairs (key 2 -> 17, key 0 -> 200), query key 0::

    258 17 256 200 259 200 0 0 0
    k=2 v  k=0 v   q=0 ans pad

The model reads the first 2N + 2 tokens; the target at position 4 (the query) is 200.
Slices: `n_pairs`, the number of stored pairs (the paper's Figure 2 axis).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from ..configtools import option
from ..errors import ConfigError
from ..registry import TASKS
from .base import Task, TaskConfig


@dataclass
class RetrievalConfig(TaskConfig):
    n_pairs: int = option(8, "N: the most key-value pairs in a sequence (the paper uses 30)")
    vocab_size: int = option(512, "vocabulary; keys and queries live in its upper half")

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.n_pairs < 1:
            raise ConfigError(f"task.n_pairs must be positive, got {self.n_pairs}")
        if self.vocab_size % 2 or 2 * self.n_pairs > self.vocab_size // 2:
            raise ConfigError(
                f"task.vocab_size={self.vocab_size} must be even with room for 2 * task.n_pairs="
                f"{2 * self.n_pairs} key and query tokens in its upper half")
        values, space = self.vocab_size // 2 - 1, 0
        for n in range(1, self.n_pairs + 1):  # ordered distinct keys x values x which key is queried
            space += math.perm(self.n_pairs, n) * values ** n * n
        self.check_room(space, f"task.n_pairs={self.n_pairs}")


@TASKS.register("retrieval")
class Retrieval(Task):
    Config = RetrievalConfig

    def __init__(self, cfg: RetrievalConfig):
        super().__init__(cfg)
        self.n = cfg.n_pairs
        self.half = cfg.vocab_size // 2
        self.vocab_size = cfg.vocab_size
        self.seq_len = 2 * self.n + 2

    def sample(self, rng: np.random.Generator, count: int) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        N, half = self.n, self.half
        rows = np.arange(count)
        n_pairs = rng.integers(1, N + 1, size=count)
        keys = rng.permuted(np.tile(np.arange(N), (count, 1)), axis=1)  # distinct keys per row
        values = rng.integers(1, half, size=(count, N))
        stored = np.arange(N)[None, :] < n_pairs[:, None]
        which = (rng.random(count) * n_pairs).astype(np.int64)  # index of the queried pair
        seqs = np.zeros((count, 2 * N + 3), dtype=np.int64)
        seqs[:, 0:2 * N:2] = np.where(stored, keys + half, 0)
        seqs[:, 1:2 * N:2] = np.where(stored, values, 0)
        seqs[rows, 2 * n_pairs] = keys[rows, which] + N + half
        seqs[rows, 2 * n_pairs + 1] = values[rows, which]
        return seqs, {"n_pairs": n_pairs}

    def target_mask(self, inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return inputs >= self.n + self.half  # the query token

