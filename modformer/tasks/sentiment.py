"""Sentiment classification (`sentiment`): the random-attention paper's Yelp-polarity task,
a classifier read at the last non-pad token (or, `pooling: mean`, over every position).

Each review is tokenized, followed by end-of-text, cut to seq_len tokens (its first ones,
end-of-text kept last; `truncate: tail` keeps its last ones instead) and padded on the
right. The class is predicted at the last non-pad position, the end-of-text token, from
the logits of n_classes ids reserved after the tokenizer's vocabulary: class c is id
V + c, where V = the tokenizer's vocabulary (`task.tokenizer_vocab` for the trained BPE).
The loss is the cross-entropy over those n_classes logits only, so the model's ordinary
output head is the classifier and every modformer model fits unchanged. With V = 4096,
seq_len 8 and the review "Great film." (3 tokens, say 812 2270 14), label 1::

    inputs   812 2270 14 0     1 1 1 1       (0 = end-of-text, 1 = padding)
    targets  -   -    -  4097  - - - -       (- = not scored; 4097 = class 1)

`task.pooling: mean` reads the class from the mean over the review's positions instead (the
output head is linear, so averaging its class logits is applying it to the mean state).
The paper's classifier is bidirectional: set `model.mixer_options.causal=false` (an option
of attention and of MixiT's mixing alike) so every position sees the whole review; a causal
model works too, since the last position already sees every token.

Sources: `imdb` (offline, the default), `rotten_tomatoes`, `movie_reviews` (both), the
Hugging Face `yelp_polarity` (network), or a local CSV, JSONL or Parquet file with a text
and a label column (classes 0 .. n_classes - 1). Metrics: `accuracy` (held-out), `loss`;
slice `label` (accuracy per class).
"""

from __future__ import annotations

from typing import Literal
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from ..configtools import option
from ..data.corpus import Corpus
from ..data.store import TokenSplit
from ..errors import ConfigError
from ..registry import TASKS
from .base import IGNORE, Batch
from .text import TextTask, TextTaskConfig


@dataclass
class SentimentConfig(TextTaskConfig):
    name: str = option("sentiment", "registered task (`modformer list` shows them)")
    source: str = option("imdb", "the labelled text: imdb, rotten_tomatoes, movie_reviews (packaged, offline); "
                                 "yelp_polarity, hf:NAME[:CONFIG] (Hugging Face, network); or a .csv/.jsonl/.parquet "
                                 "file or folder with text and label columns")
    label_column: str = option("label", "column (or JSON field) holding the class, an integer 0 .. n_classes - 1")
    n_classes: int = option(2, "number of classes")
    truncate: Literal["head", "tail"] = option("head", "which part of a long review is kept: head (its first tokens) or tail (its last)")
    pooling: Literal["last", "mean"] = option("last", "where the class is read: last (at the last non-pad token, the paper's classifier) "
                                  "or mean (the class logits averaged over the review's non-pad positions: the "
                                  "output head applied to the mean of its final normed states)")
    validation_fraction: float = option(0.1, "fraction of the (distinct) documents in the validation split")
    test_fraction: float = option(0.1, "fraction of the (distinct) documents in the test split")
    test_size: int = option(2500, "examples of the test split in the test set; all if fewer")
    validation_size: int = option(1000, "examples of the validation split in the validation set; all if fewer")

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.n_classes < 2:
            raise ConfigError(f"task.n_classes must be at least 2, got {self.n_classes}")


@TASKS.register("sentiment")
class Sentiment(TextTask):
    Config = SentimentConfig

    def __init__(self, cfg: SentimentConfig):
        super().__init__(cfg)
        self.label_column = cfg.label_column
        self.n_classes = cfg.n_classes
        self.first_class = self.text_vocab  # class c is predicted as id text_vocab + c
        self.vocab_size = self.text_vocab + cfg.n_classes

    def check_corpus(self, corpus: Corpus) -> None:
        for name, split in corpus.splits.items():
            bad = split.labels[(split.labels < 0) | (split.labels >= self.n_classes)]
            if len(bad):
                raise ConfigError(f"data source '{self.cfg.source}' has label {int(bad[0])} in its {name} split; "
                                  f"labels must lie in 0..{self.n_classes - 1} (task.n_classes)")

    def items(self, split: TokenSplit) -> int:
        return split.num_units

    def rows(self, split: TokenSplit, indices: np.ndarray) -> Batch:
        """indices: (B,) reviews -> inputs (B, seq_len), padded; targets IGNORE but at the last token."""
        L, B = self.seq_len, len(indices)
        inputs = np.full((B, L), self.tokenizer.pad_id, dtype=np.int64)
        targets = np.full((B, L), IGNORE, dtype=np.int64)
        labels = split.labels[indices]
        for row, i in enumerate(indices):
            tokens = split.unit(int(i))  # ends with end-of-text
            if len(tokens) > L:
                tokens = tokens[-L:] if self.cfg.truncate == "tail" else np.append(tokens[:L - 1], tokens[-1])
            inputs[row, :len(tokens)] = tokens
            targets[row, len(tokens) - 1] = self.first_class + labels[row]
        return Batch.from_numpy(inputs, targets, {"label": labels})

    def _class_logits(self, logits: torch.Tensor, batch: Batch) -> tuple[torch.Tensor, torch.Tensor]:
        """logits (B, T, V) -> each example's class logits (B, n_classes), at its scored position
        or (`pooling: mean`) averaged over its positions up to that one, and the classes (B,)."""
        scored = batch.targets != IGNORE  # exactly one position per row: the last non-pad one
        classes = logits[..., self.first_class:self.first_class + self.n_classes].float()  # (B, T, n_classes)
        if self.cfg.pooling == "mean":
            last = scored.int().argmax(1)  # (B,)
            review = torch.arange(scored.shape[1], device=scored.device)[None, :] <= last[:, None]  # (B, T)
            picked = classes.masked_fill(~review[..., None], 0.0).sum(1) / review.sum(1, keepdim=True)
        else:
            picked = classes[scored]
        return picked, batch.targets[scored] - self.first_class

    def loss(self, logits: torch.Tensor, batch: Batch, reduction: str = "mean") -> torch.Tensor:
        """Cross-entropy over the n_classes class logits (at the last non-pad token, or their mean)."""
        class_logits, classes = self._class_logits(logits, batch)
        return F.cross_entropy(class_logits, classes, reduction=reduction)

    def score(self, logits: torch.Tensor, batch: Batch) -> dict[str, torch.Tensor]:
        class_logits, classes = self._class_logits(logits, batch)
        correct = (class_logits.argmax(-1) == classes).float()
        return {"correct": correct, "tokens_correct": correct, "tokens": torch.ones_like(correct),
                "loss_sum": F.cross_entropy(class_logits, classes, reduction="none")}
