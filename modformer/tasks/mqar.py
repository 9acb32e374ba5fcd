"""Multi-query associative recall (MQAR; Arora, Eyuboglu et al. 2023, "Zoology").

Modelled on HazyResearch/zoology's `multiquery_ar` generator (zoology/data), with its
defaults: vocabulary 8192, power-law query gaps with power_a = 0.01, random filler tokens.

Format of one full row (length seq_len + 1, zoology's input_seq_len + 1), n key-value pairs:

- keys: n distinct tokens in 1 .. V/2 - 1; values: n distinct tokens in V/2 .. V - 1;
- context: k_1 v_1 k_2 v_2 .. k_n v_n (positions 0 .. 2n - 1);
- query region (positions 2n .. seq_len): every key is queried exactly once, at an even
  offset 2 g_j from its start, and its value follows it; key j gets the j-th gap drawn, the
  gaps drawn without replacement from 0 .. (seq_len - 2n) // 2 - 1 with P(g) proportional
  to (g + 1)^(power_a - 1) (short gaps favoured, as repeated bigrams in text);
- every other position is filler: a token drawn uniformly from the vocabulary minus this
  row's keys (`noise`, zoology's random_non_queries), or 0 with noise off.

Scored: the prediction at each query, i.e. the value, which is also the next token. One
difference from zoology: there the position after a query holds filler and the answer lives
only in the labels; here it holds the answer, so the row is an ordinary next-token sequence
(queries never repeat a key, so an answer gives away nothing later). Filler never holds one
of the row's keys, which makes the queries exactly the key tokens after the context; that
and `n_pairs` (the slice) are how `to_batch` finds them.

Worked example, V = 16, seq_len = 16, n = 2, noise off: pairs 3 -> 9 and 5 -> 12, gaps
g(3) = 1 and g(5) = 0::

    position  0  1  2  3  4  5  6  7  8 .. 16
    row       3  9  5 12  5 12  3  9  0 ..  0
              k  v  k  v  q  a  q  a  filler
    inputs:   3 9 5 12 5 12 3 9 0 0 0 0 0 0 0 0
    targets:  -100 x4, 12, -100, 9, -100 x9

`accuracy` is every query of an example right; `token_accuracy`, the fraction of queries
right, is zoology's accuracy. Slices: `n_pairs`, drawn uniformly from `kv_pairs`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..configtools import option
from ..errors import ConfigError
from ..registry import TASKS
from .base import IGNORE, Batch, Task, TaskConfig


@dataclass
class MQARConfig(TaskConfig):
    name: str = option("mqar", "registered task (`modformer list` shows them)")
    vocab_size: int = option(8192, "V: keys in 1..V/2-1, values in V/2..V-1 (zoology uses 8192)")
    seq_len: int = option(128, "model input length (zoology's input_seq_len); needs 4 x the most pairs")
    kv_pairs: tuple[int, ...] = option((4, 8, 16, 32), "numbers of key-value pairs, one drawn uniformly per example")
    power_a: float = option(0.01, "query gap law P(g) ~ (g+1)^(power_a-1); 1 is uniform (zoology: 0.01)")
    noise: bool = option(True, "fill unused positions with random non-key tokens (zoology's random_non_queries); "
                               "false: 0")

    def __post_init__(self) -> None:
        super().__post_init__()
        if not self.kv_pairs or min(self.kv_pairs) < 1:
            raise ConfigError(f"task.kv_pairs must be a non-empty list of positive counts, got {list(self.kv_pairs)}")
        most = max(self.kv_pairs)
        if 4 * most > self.seq_len:  # n pairs, then n distinct query slots of two tokens
            raise ConfigError(f"task.seq_len={self.seq_len} is too short for {most} pairs (task.kv_pairs): "
                              f"it needs at least {4 * most}")
        if self.vocab_size % 2 or self.vocab_size // 2 - 1 < most:
            raise ConfigError(f"task.vocab_size={self.vocab_size} must be even with at least {most} key "
                              f"tokens in 1..V/2-1 (task.kv_pairs)")
        if not self.power_a > 0:
            raise ConfigError(f"task.power_a must be positive, got {self.power_a}")


def distinct(rng: np.random.Generator, count: int, m: int, pool: int) -> np.ndarray:
    """(count, m): per row, m distinct values of 0..pool-1 in random order (uniform).

    Drawn one column at a time: the j-th is the u-th of the pool minus the j already taken,
    u uniform in 0..pool-j-1 (so the loop is over columns, not examples)."""
    out = np.empty((count, m), dtype=np.int64)
    for j in range(m):
        u = rng.integers(0, pool - j, size=count)
        out[:, j] = skip_taken(u, np.sort(out[:, :j], axis=1))
    return out


def skip_taken(u: np.ndarray, taken: np.ndarray) -> np.ndarray:
    """The u-th (0-based) integer not in `taken`, per row. u: (B,) or (B, T); taken: (B, m)
    sorted ascending per row, distinct, non-negative (pad with a value above every result).

    With t_0 < t_1 < .., the answer is u plus the number of i with t_i - i <= u; t_i - i is
    non-decreasing, so a per-row searchsorted counts them."""
    B, m = taken.shape
    if m == 0 or B == 0:
        return u.copy()
    key = taken - np.arange(m)  # non-decreasing per row, >= 0
    span = int(max(key.max(), u.max())) + 2  # rows live in disjoint, increasing ranges
    offset = (np.arange(B) * span)[:, None]
    found = np.searchsorted((key + offset).ravel(), (u.reshape(B, -1) + offset).ravel(), side="right")
    below = found.reshape(B, -1) - (np.arange(B) * m)[:, None]  # minus the earlier rows' entries
    return u + below.reshape(u.shape)


@TASKS.register("mqar")
class MQAR(Task):
    Config = MQARConfig

    def __init__(self, cfg: MQARConfig):
        super().__init__(cfg)
        self.vocab_size = cfg.vocab_size
        self.seq_len = cfg.seq_len
        self.half = cfg.vocab_size // 2
        self.choices = np.array(sorted(set(cfg.kv_pairs)), dtype=np.int64)

    def sample(self, rng: np.random.Generator, count: int) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """Full rows (count, seq_len + 1) and slices {"n_pairs": (count,)}."""
        V, L, half = self.vocab_size, self.seq_len, self.half
        n = self.choices[rng.integers(0, len(self.choices), size=count)]
        m = int(n.max()) if count else 0
        keys = 1 + distinct(rng, count, m, half - 1)
        values = half + distinct(rng, count, m, V - half)
        used = np.arange(m)[None, :] < n[:, None]  # (count, m): columns that are real pairs
        # Gaps: Gumbel top-k over the slots draws without replacement with P ~ p (Plackett-Luce),
        # the same law as sequential weighted draws.
        space = (L - 2 * n) // 2  # query slots per row, >= n
        slots = np.arange(int(space.max()) if count else 0)
        score = (self.cfg.power_a - 1) * np.log(slots + 1.0) + rng.gumbel(size=(count, len(slots)))
        score[slots[None, :] >= space[:, None]] = -np.inf
        gaps = np.argsort(-score, axis=1, kind="stable")[:, :m]
        if self.cfg.noise:
            # Pads: distinct, above every token, so they sort last and are never skipped.
            padded = np.sort(np.where(used, keys, V + np.arange(m)), axis=1)
            seqs = skip_taken(rng.integers(0, V - n[:, None], size=(count, L + 1)), padded)
        else:
            seqs = np.zeros((count, L + 1), dtype=np.int64)
        r, j = np.nonzero(used)
        seqs[r, 2 * j], seqs[r, 2 * j + 1] = keys[r, j], values[r, j]
        query = 2 * n[r] + 2 * gaps[r, j]
        seqs[r, query], seqs[r, query + 1] = keys[r, j], values[r, j]
        return seqs, {"n_pairs": n}

    def to_batch(self, seqs: np.ndarray, slices: dict[str, np.ndarray]) -> Batch:
        """Full rows (B, seq_len + 1) -> inputs and next-token targets (B, seq_len), scored at
        the queries: positions past the context whose token is one of the row's keys."""
        seqs = np.ascontiguousarray(seqs, dtype=np.int64)
        n = slices["n_pairs"].astype(np.int64)
        inputs, targets = seqs[:, :-1], seqs[:, 1:].copy()
        pos = np.arange(self.seq_len)[None, :]
        in_context = pos < 2 * n[:, None]
        row_keys = np.where(pos[:, ::2] < 2 * n[:, None], inputs[:, ::2], -1)  # (B, ceil(L/2)); -1 never a token
        code = np.arange(len(seqs))[:, None] * (self.vocab_size + 1) + 1
        is_key = np.isin(code + inputs, code + row_keys)  # membership within the same row only
        targets[in_context | ~is_key] = IGNORE
        return Batch.from_numpy(inputs, targets, slices)
