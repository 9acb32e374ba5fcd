"""Memorization: recall a fixed random label for every pair (x1, x2); capacity in bits.

The random-attention paper's `hdmemorize_512_2_1.0` (princeton-pli/MixiT,
`hdmemorize_exp.py`): n^2 facts, one per pair (x1, x2) in 0..n-1 x 0..n-1, each with a
label y drawn uniformly from 0..n-1 once, from `label_seed` (or `test_seed` if unset), so
every run sees the same fact table. Token layout (the reference's, vocabulary 2n):

- x1 is token x1 (0..n-1), x2 is token n + x2 (n..2n-1), so position tells them apart;
- the label y is token y (0..n-1): labels share the id space of x1, as in the reference.

A full row is [x1, n + x2, y]; the model reads [x1, n + x2] (seq_len 2) and only the
prediction at the second position (the label) is scored. Worked example, n = 4, fact
(x1 = 2, x2 = 3) -> y = 1::

    row: 2 7 1     inputs: 2 7     targets: -100 1

There is nothing held out: accuracy is measured on the training set. `test_set` is the
whole table (x1-major order; `task.test_size` is ignored), scored once at the end;
`validation_set`, scored during training, is a fixed sample of `task.validation_size` facts
of the table (an estimate of the recall, at a fraction of the cost). The training stream
emits the same facts, as a fresh seeded permutation of the table each epoch (a pure function
of (seed, step); batches run across epoch boundaries). `summarize` adds `recalled`, the
number of facts answered correctly (on the test set: of all n^2); capacity_bits_per_parameter
turns it into the paper's bits per trainable parameter.

Knowledge injection: `task.new_facts` sets apart a fixed share of the table (chosen from the
label seed) as *new* facts; `task.facts` picks what trains: all, old (the rest) or new. The
test set is still the whole table, with slice `new` (0: old fact, 1: new fact), so one
evaluation shows what was learned and what was kept. Validation samples the facts that
train. Without new facts there are no slices.
"""

from __future__ import annotations

from typing import Literal
import math
from dataclasses import dataclass

import numpy as np
import torch

from ..configtools import option
from ..errors import ConfigError
from ..registry import TASKS
from .base import Batch, Task, TaskConfig

MAX_N = 2048  # the table (n^2 rows) is materialised for evaluation: 4.2M facts at most


@dataclass
class MemorizationConfig(TaskConfig):
    name: str = option("memorization", "registered task (`modformer list` shows them)")
    n: int = option(512, "x1, x2 and the label each range over 0..n-1: n^2 facts (the paper uses 512)")
    label_seed: int | None = option(None, "seed of the label table; null: use task.test_seed")
    new_facts: float = option(0.0, "share of the table set apart as new facts (knowledge injection), in [0, 1); "
                                   "the test set then reports old and new facts as slice `new`")
    facts: Literal["all", "old", "new"] = option("all", "facts that train: all, old (all but the new ones) or new (only the new ones)")

    def __post_init__(self) -> None:
        super().__post_init__()
        if not 2 <= self.n <= MAX_N:  # n = 1 stores log2(1) = 0 bits
            raise ConfigError(f"task.n must be in 2..{MAX_N}, got {self.n}")
        if not 0 <= self.new_facts < 1:
            raise ConfigError(f"task.new_facts must lie in [0, 1), got {self.new_facts}")
        if self.facts != "all" and round(self.new_facts * self.n * self.n) == 0:
            raise ConfigError(f"task.facts={self.facts} needs new facts: set task.new_facts above 0 "
                              f"(of {self.n * self.n} facts)")
        if self.facts == "old" and round(self.new_facts * self.n * self.n) == self.n * self.n:
            raise ConfigError(f"task.new_facts={self.new_facts} makes every one of the {self.n * self.n} facts new: "
                              f"task.facts=old has nothing to train on")


def capacity_bits_per_parameter(recalled: float, n: int, trainable_parameters: int) -> float:
    """Bits stored per trainable parameter: recalled facts x log2(n) / trainable parameters.

    The paper's estimate: each recalled label is worth log2(n) bits. It does not subtract
    chance (a guessing model recalls about n^2 / n = n facts), negligible once a model
    recalls far more than n facts."""
    if trainable_parameters <= 0:
        raise ValueError(f"trainable_parameters must be positive, got {trainable_parameters}")
    return recalled * math.log2(n) / trainable_parameters


@TASKS.register("memorization")
class Memorization(Task):
    Config = MemorizationConfig

    def __init__(self, cfg: MemorizationConfig):
        super().__init__(cfg)
        self.n = cfg.n
        self.vocab_size = 2 * cfg.n
        self.seq_len = 2
        seed = cfg.test_seed if cfg.label_seed is None else cfg.label_seed
        # labels[x1 * n + x2] = y: the fact table, fixed by its seed.
        self.labels = np.random.default_rng([seed, 0x1ABE1]).integers(0, cfg.n, size=cfg.n * cfg.n)
        total = cfg.n * cfg.n
        self.is_new = np.zeros(total, dtype=bool)
        self.is_new[np.random.default_rng([seed, 0x9E7]).permutation(total)[:round(cfg.new_facts * total)]] = True
        # The facts that train, ascending: the whole table, the old ones or the new ones.
        self.trained = {"all": np.arange(total), "old": np.flatnonzero(~self.is_new),
                        "new": np.flatnonzero(self.is_new)}[cfg.facts]
        self._table: Batch | None = None
        self._validation: Batch | None = None
        self._perms: dict[tuple[int, int], np.ndarray] = {}

    def rows(self, facts: np.ndarray) -> np.ndarray:
        """Fact indices x1 * n + x2, shape (B,) -> full rows (B, 3): x1, n + x2, y."""
        facts = np.asarray(facts, dtype=np.int64)
        return np.stack([facts // self.n, self.n + facts % self.n, self.labels[facts]], axis=1)

    def _slices(self, facts: np.ndarray) -> dict[str, np.ndarray]:
        return {"new": self.is_new[facts].astype(np.int64)} if self.is_new.any() else {}

    def sample(self, rng: np.random.Generator, count: int) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """`count` of the trained facts drawn uniformly with replacement: rows (count, 3)."""
        facts = self.trained[rng.integers(0, len(self.trained), size=count)]
        return self.rows(facts), self._slices(facts)

    def target_mask(self, inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        mask = inputs.new_zeros(inputs.shape, dtype=bool)
        mask[:, 1] = True  # the label after x2; the x2 after x1 is not a fact
        return mask

    def test_set(self) -> Batch:
        """Every fact once, x1-major: n^2 examples."""
        if self._table is None:
            facts = np.arange(self.n * self.n)
            self._table = self.to_batch(self.rows(facts), self._slices(facts))
        return self._table

    def validation_set(self) -> Batch:
        """`validation_size` distinct trained facts (all of them if fewer), fixed by `test_seed`."""
        if self._validation is None:
            rng = np.random.default_rng([self.cfg.test_seed, 0x7A11])
            pick = rng.choice(len(self.trained), size=min(self.cfg.validation_size, len(self.trained)), replace=False)
            facts = self.trained[np.sort(pick)]
            self._validation = self.to_batch(self.rows(facts), self._slices(facts))
        return self._validation

    def is_held_out(self, seqs: np.ndarray) -> np.ndarray:
        """(count,) bool, all False: the model is scored on the facts it trains on."""
        return np.zeros(len(seqs), dtype=bool)

    def _permutation(self, seed: int, epoch: int) -> np.ndarray:
        """The order of the trained facts in `epoch` of the stream seeded by `seed`."""
        key = (seed, epoch)
        if key not in self._perms:
            if len(self._perms) >= 2:  # a batch spans at most two epochs unless n is tiny
                self._perms.pop(next(iter(self._perms)))
            self._perms[key] = self.trained[np.random.default_rng([seed, epoch, 0x3E3]).permutation(len(self.trained))]
        return self._perms[key]

    def train_batch(self, seed: int, step: int, batch_size: int) -> Batch:
        """Items [step * B, (step + 1) * B) of the stream: epoch e is a permutation of the
        trained facts drawn from (seed, e), so every epoch shows each of them exactly once."""
        total = len(self.trained)
        parts, pos, end = [], step * batch_size, (step + 1) * batch_size
        while pos < end:
            epoch, offset = divmod(pos, total)
            take = min(total - offset, end - pos)
            parts.append(self._permutation(seed, epoch)[offset:offset + take])
            pos += take
        facts = np.concatenate(parts)
        return self.to_batch(self.rows(facts), self._slices(facts))

    def summarize(self, totals: dict[str, float], examples: int) -> dict[str, float]:
        return {**super().summarize(totals, examples), "recalled": totals["correct"]}

    def model_metrics(self, metrics: dict, parameters: dict[str, int]) -> dict[str, float]:
        return {"bits_per_parameter": capacity_bits_per_parameter(metrics["recalled"], self.n, parameters["trainable"])}
