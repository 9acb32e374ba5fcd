"""Dyck-1 (`dyck_N`): is a string of parentheses balanced?

Format (the random-attention paper's reference format, vocabulary 4, length 2N + 3):
0 pad, 1 '(', 2 ')', 3 '?'. A string, then '?', then the answer: ')' (2) if the string is
balanced, '(' (1) if not; padding 0 to length 2N + 3. Strings are drawn as in the
reference code:

- a third are uniformly random strings of length 1..2N;
- the rest are balanced strings of t pairs, t uniform in 1..N, from the reference's
  recursive generator (t = 1: '()'; else with probability 1/2 '(' + [t-1 pairs] + ')',
  otherwise [u pairs] + [t-u pairs] with u uniform in 1..t-1). Half of these are kept as
  they are; the other half draw a mutation code in 0..3 (so a quarter of them are not
  mutated either): bit 1 makes 1, 2, ... random swaps (geometric, mean 2; a swap of
  positions p, q is skipped unless p < q), bit 2 makes that many random flips, doubled
  with probability 2/3. A mutation can leave the string balanced: the label is always
  computed from the final string.

The reference also mutates its random strings; swaps and flips of a uniform random
string leave it uniform, so that is skipped here without changing the distribution.

Only the answer is scored: the prediction at '?'. Worked examples, N = 3::

    1 1 2 2 3 2 0 0 0        1 2 2 1 3 1 0 0 0
    ( ( ) ) ? ) pad          ( ) ) ( ? ( pad
    balanced                 not balanced

The model reads the first 2N + 2 tokens; the target at position 4 (the '?') is 2 and 1.
Slices: `balanced` (1 if the string is balanced) and `kind` (0 random, 1 balanced as
generated, 2 balanced then mutated).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from ..configtools import option
from ..errors import ConfigError
from ..registry import TASKS
from .base import Task, TaskConfig

PAD, OPEN, CLOSE, QUERY = 0, 1, 2, 3
RANDOM, BALANCED, MUTATED = 0, 1, 2


@dataclass
class DyckConfig(TaskConfig):
    name: str = option("dyck", "registered task (`modformer list` shows them)")
    max_pairs: int = option(40, "N: the most pairs in a balanced string; strings have at most 2N "
                                "characters and sequences 2N + 3 tokens (the reference README runs N = 40)")

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.max_pairs < 1:
            raise ConfigError(f"task.max_pairs must be positive, got {self.max_pairs}")
        space = 2 ** (2 * self.max_pairs + 1) - 2  # strings of length 1..2N; each has one label
        self.check_room(space, f"task.max_pairs={self.max_pairs}")


@TASKS.register("dyck")
class Dyck(Task):
    Config = DyckConfig
    vocab_size = 4

    def __init__(self, cfg: DyckConfig):
        super().__init__(cfg)
        self.n = cfg.max_pairs
        self.seq_len = 2 * self.n + 2

    def sample(self, rng: np.random.Generator, count: int) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        width = 2 * self.n
        is_random = rng.integers(0, 3, size=count) == 0
        mutation = np.where(rng.integers(0, 2, size=count) == 1, 0, rng.integers(0, 4, size=count))
        mutation[is_random] = 0
        kind = np.where(is_random, RANDOM, np.where(mutation > 0, MUTATED, BALANCED))

        lengths = rng.integers(1, width + 1, size=count)
        strings = rng.integers(OPEN, CLOSE + 1, size=(count, width))
        made = np.flatnonzero(~is_random)
        pairs = rng.integers(1, self.n + 1, size=made.size)
        strings[made] = balanced_strings(rng, pairs, width)
        lengths[made] = 2 * pairs
        strings[np.arange(width)[None, :] >= lengths[:, None]] = PAD
        mutate(rng, strings, lengths, mutation)

        balanced = is_balanced(strings)
        seqs = np.zeros((count, width + 3), dtype=np.int64)
        seqs[:, :width] = strings
        rows = np.arange(count)
        seqs[rows, lengths] = QUERY
        seqs[rows, lengths + 1] = np.where(balanced, CLOSE, OPEN)
        return seqs, {"balanced": balanced.astype(np.int64), "kind": kind}

    def target_mask(self, inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """inputs, targets: (B, T). Only the prediction at '?' is scored."""
        return inputs == QUERY


def balanced_strings(rng: np.random.Generator, pairs: np.ndarray, width: int) -> np.ndarray:
    """(m,) pair counts -> (m, width) balanced strings padded with 0, distributed as the
    reference's recursive generator. Each row keeps a stack of pending (pairs, offset)
    nodes; every step pops one node per row, so the rows advance together. A node that is
    a single pair or a wrap writes its own '(' and ')' at its two ends."""
    m = pairs.size
    out = np.zeros((m, width), dtype=np.int64)
    # Pending nodes hold disjoint sets of pairs, so a row never has more than N of them.
    stack_t = np.zeros((m, width // 2 + 1), dtype=np.int64)
    stack_off = np.zeros_like(stack_t)
    stack_t[:, 0] = pairs
    depth = (pairs > 0).astype(np.int64)
    while depth.any():
        r = np.flatnonzero(depth)
        depth[r] -= 1
        t, off = stack_t[r, depth[r]], stack_off[r, depth[r]]
        u = rng.random(r.size)
        split = (t >= 2) & (u >= 0.5)
        ends = ~split  # one pair, or '(' + [t-1 pairs] + ')'
        out[r[ends], off[ends]] = OPEN
        out[r[ends], off[ends] + 2 * t[ends] - 1] = CLOSE
        wrap = ends & (t >= 2)
        _push(stack_t, stack_off, depth, r[wrap], t[wrap] - 1, off[wrap] + 1)
        # u in [0.5, 1) -> left part uniform in 1..t-1
        s, ts = r[split], t[split]
        left = np.minimum(1 + ((u[split] - 0.5) * 2 * (ts - 1)).astype(np.int64), ts - 1)
        _push(stack_t, stack_off, depth, s, left, off[split])
        _push(stack_t, stack_off, depth, s, ts - left, off[split] + 2 * left)
    return out


def _push(stack_t: np.ndarray, stack_off: np.ndarray, depth: np.ndarray, rows: np.ndarray,
          t: np.ndarray, off: np.ndarray) -> None:
    stack_t[rows, depth[rows]] = t
    stack_off[rows, depth[rows]] = off
    depth[rows] += 1


def mutate(rng: np.random.Generator, strings: np.ndarray, lengths: np.ndarray, mutation: np.ndarray) -> None:
    """In place on (count, width) strings of (count,) lengths: swaps where bit 1 of
    `mutation` is set, then flips where bit 2 is, as the reference does."""
    count, rows = len(strings), np.arange(len(strings))
    swaps = np.where(mutation & 1, rng.geometric(0.5, size=count), 0)
    for i in range(int(swaps.max(initial=0))):
        p = (rng.random(count) * lengths).astype(np.int64)
        q = (rng.random(count) * lengths).astype(np.int64)
        go = rows[(swaps > i) & (p < q)]
        strings[go, p[go]], strings[go, q[go]] = strings[go, q[go]], strings[go, p[go]]
    flips = np.where(mutation & 2, rng.geometric(0.5, size=count), 0)
    flips *= np.where(rng.integers(0, 3, size=count) > 0, 2, 1)
    for i in range(int(flips.max(initial=0))):
        p = (rng.random(count) * lengths).astype(np.int64)
        go = rows[flips > i]
        strings[go, p[go]] = OPEN + CLOSE - strings[go, p[go]]


def is_balanced(strings: np.ndarray) -> np.ndarray:
    """(count, width) padded strings -> (count,) bool: no prefix closes more than it opens,
    and the whole string closes all it opens."""
    height = np.cumsum((strings == OPEN).astype(np.int64) - (strings == CLOSE), axis=1)
    return (height.min(axis=1) >= 0) & (height[:, -1] == 0)
