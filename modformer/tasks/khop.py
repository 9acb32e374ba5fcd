"""k-hop induction heads (Sanford, Hsu, Telgarsky 2024, "Transformers, parallel computation,
and logarithmic depth", ICML; arXiv 2402.09268).

Definition followed: the paper's, as implemented in its code (chsanford/hop-induction-heads,
`InductionHopsFullSequenceTask`). For a string X = X_0 .. X_{L-1},

    find(i)  = 1 + max{ j < i : X_j = X_i }      (none if X_i does not occur before i)
    hop_k(X)_i = X_{find^k(i)}                   (the null token if some find is none)

so hop-0 is the string itself and each hop moves a *position*: hop-(j+1) at i is the letter
right after the last occurrence of hop-j's letter that lies before hop-j's position
(find^j(i)), not merely before i. The two readings differ; this is the one whose depth
lower bound the paper proves (log k layers). Strings have no immediate repeats, so every
find strictly moves left and the chain ends.

Token ids (letters=4, max_hops=16: vocabulary 22):

- letters 0 .. letters-1 (a=0, b=1, c=2, d=3); the null token `letters` (4);
- the hop-count token for k: letters + 1 + k (k=0 -> 5, ..., k=16 -> 21).

A full row is the model input followed by the answer string, because the target is not the
shifted input: [hop token, X_0 .. X_{L-1}, hop_k(X)_0 .. hop_k(X)_{L-1}], width 2L + 1. The
model reads [hop token, X_0 .. X_{L-1}] (seq_len = L + 1) and the target at input position
i + 1 (the letter X_i) is hop_k(X)_i: it has read X_0 .. X_i, which is all hop_k needs.
Every string position is scored, null included; the hop token's position is not.

k is drawn per example uniformly in min_hops .. max_hops (the reference's `min_hops`,
`max_hops`); min_hops = max_hops fixes k. Slices: `hops`, the k of each example.

Worked example, L = 8, k = 2, X = a b c a b d a c::

    position i        0  1  2  3  4  5  6  7
    X                 a  b  c  a  b  d  a  c
    find(i)           -  -  -  1  2  -  4  3      (after the last earlier a, b, .., c)
    find(find(i))     -  -  -  -  -  -  2  1
    hop_2(X)          ~  ~  ~  ~  ~  ~  c  b      (~ is the null token)

    full row:  7 | 0 1 2 0 1 3 0 2 | 4 4 4 4 4 4 2 1
    inputs:    7 0 1 2 0 1 3 0 2
    targets:   -100 4 4 4 4 4 4 2 1

(At i = 7 the other reading would answer c: the last a before 7 is at 6, followed by c.)
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from ..configtools import option
from ..errors import ConfigError
from ..registry import TASKS
from .base import IGNORE, Batch, Task, TaskConfig


@dataclass
class KHopConfig(TaskConfig):
    name: str = option("khop", "registered task (`modformer list` shows them)")
    length: int = option(100, "L: letters in the string (the paper uses 100)")
    letters: int = option(4, "alphabet size (the paper uses 4)")
    min_hops: int = option(0, "smallest k drawn; set equal to max_hops for a fixed k")
    max_hops: int = option(16, "largest k drawn, uniformly in min_hops..max_hops (the paper uses 16)")

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.length < 1:
            raise ConfigError(f"task.length must be positive, got {self.length}")
        if self.letters < 2:  # one letter cannot avoid immediate repeats
            raise ConfigError(f"task.letters must be at least 2, got {self.letters}")
        if self.min_hops < 0:
            raise ConfigError(f"task.min_hops must be >= 0, got {self.min_hops}")
        if self.max_hops < self.min_hops:
            raise ConfigError(f"task.max_hops={self.max_hops} is smaller than task.min_hops={self.min_hops}")


def hop_positions(strings: np.ndarray, hops: np.ndarray) -> np.ndarray:
    """find^k(i) for every example and position, -1 where the chain breaks.

    strings: (B, L) letter ids without immediate repeats; hops: (B,) k per example.
    Returns (B, L) int64."""
    B, L = strings.shape
    letters = int(strings.max()) + 1 if strings.size else 1
    # last[b, i, c]: the last position < i holding letter c, or -1 (a running max per letter).
    idx = np.arange(L)
    last = np.full((B, L, letters), -1, dtype=np.int64)
    for c in range(letters):  # loop over the alphabet, vectorised over examples and positions
        seen = np.maximum.accumulate(np.where(strings == c, idx, -1), axis=1)  # last position <= i
        last[:, 1:, c] = seen[:, :-1]
    rows = np.arange(B)[:, None]
    pos = np.tile(idx, (B, 1))
    for j in range(int(hops.max()) if B else 0):  # one gather per hop
        live = (pos >= 0) & (j < hops[:, None])
        safe = np.maximum(pos, 0)
        prev = last[rows, safe, strings[rows, safe]]
        step = np.where(prev >= 0, prev + 1, -1)
        pos = np.where(live, step, pos)
    return pos


def hop_strings(strings: np.ndarray, hops: np.ndarray, null: int) -> np.ndarray:
    """hop_k(X) per example: (B, L) letters, `null` where find^k is undefined."""
    pos = hop_positions(strings, hops)
    letters = np.take_along_axis(strings, np.maximum(pos, 0), axis=1)
    return np.where(pos >= 0, letters, null)


@TASKS.register("khop")
class KHop(Task):
    Config = KHopConfig

    def __init__(self, cfg: KHopConfig):
        super().__init__(cfg)
        self.length, self.letters = cfg.length, cfg.letters
        self.null = cfg.letters
        self.hop0 = cfg.letters + 1  # token of k = 0
        self.vocab_size = cfg.letters + 2 + cfg.max_hops
        self.seq_len = cfg.length + 1

    def hop_token(self, k: int) -> int:
        return self.hop0 + k

    def sample(self, rng: np.random.Generator, count: int) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """Full rows (count, 2L + 1): hop token, string, hop-k string; slices {"hops": (count,)}."""
        L, C = self.length, self.letters
        hops = rng.integers(self.cfg.min_hops, self.cfg.max_hops + 1, size=count)
        # Each letter differs from the previous one, uniformly among the other C - 1: add a
        # non-zero shift modulo C.
        first = rng.integers(0, C, size=(count, 1))
        shifts = rng.integers(1, C, size=(count, L - 1))
        strings = (first + np.concatenate([np.zeros((count, 1), np.int64), np.cumsum(shifts, axis=1)], axis=1)) % C
        answers = hop_strings(strings, hops, self.null)
        seqs = np.concatenate([(self.hop0 + hops)[:, None], strings, answers], axis=1).astype(np.int64)
        return seqs, {"hops": hops}

    def to_batch(self, seqs: np.ndarray, slices: dict[str, np.ndarray]) -> Batch:
        """Full rows (B, 2L + 1) -> inputs (B, L + 1) and targets (B, L + 1), the first unscored."""
        seqs_t = torch.from_numpy(np.ascontiguousarray(seqs, dtype=np.int64))
        L = self.length
        inputs = seqs_t[:, :L + 1].contiguous()
        targets = torch.full_like(inputs, IGNORE)
        targets[:, 1:] = seqs_t[:, L + 1:]
        return Batch.from_numpy(inputs, targets, slices)
