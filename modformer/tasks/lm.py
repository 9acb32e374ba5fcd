"""Language modeling (`lm`) on real text: next-token prediction, scored by held-out loss
(log-perplexity) as in the random-attention paper's Wikitext-103 and Fineweb-edu runs.

Two layouts (`task.layout`):

- `packed` (default): each split's documents, each followed by end-of-text, form one token
  stream, cut into blocks of seq_len + 1 tokens that overlap by one (block i starts at
  token i x seq_len); a block's inputs are its first seq_len tokens, its targets the last
  seq_len, all scored. With seq_len 4 and the stream `To be , or not <eot> Full fathom five`
  (9 tokens: (9 - 1) // 4 = 2 blocks)::

      block 0: inputs  To  be    ,    or        targets  be    ,    or     not
      block 1: inputs  not <eot> Full fathom    targets  <eot> Full fathom five

- `lines`: the paper's one-line-per-example form: every non-empty line of a document is
  one example, its tokens and end-of-text, cut to seq_len + 1 and padded; padding is not
  scored.

Metrics: `loss` (mean cross-entropy per scored token, in nats: the log-perplexity),
`perplexity` (exp of it), and `accuracy`, here the next-token accuracy (a whole block is
never right). The validation and test sets are `validation_size` and `test_size` blocks
(or lines) of the validation and test documents (`modformer.tasks.text`).
"""

from __future__ import annotations

from typing import Literal
import math
from dataclasses import dataclass

import numpy as np

from ..configtools import option
from ..data.store import TokenSplit
from ..registry import TASKS
from .base import IGNORE, Batch
from .text import TextTask, TextTaskConfig

Layout = Literal["packed", "lines"]


@dataclass
class LMConfig(TextTaskConfig):
    name: str = option("lm", "registered task (`modformer list` shows them)")
    layout: Layout = option("packed", "packed: documents joined by end-of-text and cut into blocks of seq_len; lines: "
                                   "one example per non-empty line, padded (the paper's line-by-line form)")


@TASKS.register("lm")
class LanguageModeling(TextTask):
    Config = LMConfig
    budget_unit = "tokens"

    def __init__(self, cfg: LMConfig):
        super().__init__(cfg)
        self.packed = cfg.layout == "packed"
        self.unit = "document" if self.packed else "line"

    def item_name(self) -> str:
        return f"block of {self.seq_len + 1} tokens" if self.packed else "line"

    def items(self, split: TokenSplit) -> int:
        return (split.num_tokens - 1) // self.seq_len if self.packed else split.num_units

    def rows(self, split: TokenSplit, indices: np.ndarray) -> Batch:
        """indices: (B,) blocks (packed) or lines -> Batch of (B, seq_len) inputs and targets."""
        L = self.seq_len
        if self.packed:
            seqs = np.stack([split.read(int(i) * L, int(i) * L + L + 1) for i in indices])  # (B, L + 1)
            return Batch.from_numpy(seqs[:, :-1], seqs[:, 1:], {})
        seqs = np.full((len(indices), L + 1), self.tokenizer.pad_id, dtype=np.int64)
        lengths = np.empty(len(indices), dtype=np.int64)
        for row, i in enumerate(indices):
            tokens = split.unit(int(i))[:L + 1]
            seqs[row, :len(tokens)] = tokens
            lengths[row] = len(tokens)
        targets = seqs[:, 1:].copy()
        targets[np.arange(L)[None, :] >= (lengths - 1)[:, None]] = IGNORE  # target positions past the line
        return Batch.from_numpy(seqs[:, :-1], targets, {})

    def summarize(self, totals: dict[str, float], examples: int) -> dict[str, float]:
        metrics = super().summarize(totals, examples)
        metrics["accuracy"] = metrics["token_accuracy"]
        metrics["perplexity"] = math.exp(min(metrics["loss"], 700.0))
        return metrics
