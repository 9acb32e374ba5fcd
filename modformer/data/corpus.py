"""A prepared corpus: a source's documents split into train, validation and test by
document, a tokenizer, and the tokenized splits as a memory-mapped store.

Everything is cached under `$MODFORMER_CACHE/data` (default `~/.cache/modformer/data`, the
folder the packaged teacher uses), keyed by fingerprints: the source's (file sizes and
times, package versions or hub names; no text is read to compute it), the split settings,
the tokenizer's and the unit. A second run of the same config finds everything built and
only memory-maps it. A build holds a file lock, so the runs of a sweep that start together
build once and wait for each other. Delete the folder to rebuild.

The split: duplicate documents are dropped (the first copy is kept), each document gets
the rank of a hash of (split seed, its text), and the lowest-ranked round(fraction x n)
documents form the validation set, the next ones the test set. A document's split depends
only on its text and the seed, not on its position, and the splits never share a text.
"""

from __future__ import annotations

import contextlib
import hashlib
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

from ..errors import ModformerError
from ..files import atomic_write_folder, cache_root
from .open import open_source
from .sources import Columns, Document, digest
from .store import SPLITS, TokenSplit, TokenStore, build_store
from .tokenizer import TextTokenizer, load_tokenizer, train_bpe

UNITS = ("document", "line")
FORMAT = 1  # bump when the store or tokenizer layout changes: old caches are then ignored


@dataclass(frozen=True)
class CorpusSpec:
    source: str  # task.source: a named source or a path
    columns: Columns = field(default_factory=Columns)
    max_documents: int | None = None
    unit: str = "document"  # what one stored unit is: a document, or each non-empty line of one
    validation_fraction: float = 0.05
    test_fraction: float = 0.05
    split_seed: int = 0
    tokenizer: str = "bpe"  # "bpe" (trained here on the train split) or a path
    tokenizer_vocab: int = 4096  # ids of the trained BPE
    bpe_sample_chars: int = 20_000_000  # train the BPE on at most this many characters of train documents


def data_root() -> Path:
    return cache_root() / "data"


def split_documents(docs: list[Document], validation_fraction: float, test_fraction: float,
                    seed: int, name: str = "source") -> dict[str, list[Document]]:
    """{split: documents in source order}; see the module docstring."""
    seen: set[str] = set()
    unique = [d for d in docs if not (d.text in seen or seen.add(d.text))]
    n = len(unique)
    counts = [max(1, round(f * n)) if f > 0 else 0 for f in (validation_fraction, test_fraction)]
    if n - sum(counts) < 1:
        raise ModformerError(f"data source '{name}' has {n} distinct document(s), too few to split into train, "
                             f"validation and test by document; give more documents (for a text file, "
                             f"task.text_split=paragraph or line)")
    key = lambda i: hashlib.blake2b(unique[i].text.encode(), digest_size=8, key=str(seed).encode()).digest()  # noqa: E731
    ranked = sorted(range(n), key=key)
    which = {i: "validation" for i in ranked[:counts[0]]}
    which.update({i: "test" for i in ranked[counts[0]:counts[0] + counts[1]]})
    out: dict[str, list[Document]] = {s: [] for s in SPLITS}
    for i, d in enumerate(unique):
        out[which.get(i, "train")].append(d)
    return out


def to_units(docs: list[Document], unit: str) -> list[Document]:
    """Documents as stored units: themselves, or their non-empty lines (with their label)."""
    if unit == "document":
        return docs
    return [Document(line, d.label) for d in docs for line in d.text.splitlines() if line.strip()]


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """An exclusive lock on `path` (a lock file) while building; a no-op where fcntl is missing."""
    try:
        import fcntl
    except ImportError:
        yield
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


class Corpus:
    """A prepared corpus: `tokenizer`, `splits` (name -> TokenSplit) and `folder` (its store)."""

    def __init__(self, spec: CorpusSpec, *, progress: bool = True):
        self.spec = spec
        self.progress = progress
        self.source = open_source(spec.source, spec.columns, max_documents=spec.max_documents)
        self._split_docs: dict[str, list[Document]] | None = None
        split_key = (self.source.fingerprint(), spec.validation_fraction, spec.test_fraction, spec.split_seed, FORMAT)
        self.tokenizer = self._tokenizer(split_key)
        store_id = {"source": spec.source, "split": list(split_key), "unit": spec.unit,
                    "tokenizer": self.tokenizer.fingerprint()}
        self.folder = data_root() / "stores" / digest(store_id)
        if not TokenStore.complete(self.folder):
            with _locked(self.folder.with_name(self.folder.name + ".lock")):
                if not TokenStore.complete(self.folder):  # another process may have built it meanwhile
                    self._documents()
                    self._say(f"tokenizing data source '{spec.source}' into {self.folder} (once; reused after)")
                build_store(self.folder, lambda: {k: to_units(v, spec.unit) for k, v in self._documents().items()},
                            self.tokenizer, identity=store_id, progress=progress)
        self.store = TokenStore(self.folder)
        self.splits: dict[str, TokenSplit] = self.store.splits

    def _say(self, message: str) -> None:
        if self.progress:
            print(f"modformer: {message}", file=sys.stderr)

    def _documents(self) -> dict[str, list[Document]]:
        """The split documents, read from the source at most once."""
        if self._split_docs is None:
            s = self.spec
            self._split_docs = split_documents(self.source.documents(), s.validation_fraction, s.test_fraction,
                                               s.split_seed, s.source)
        return self._split_docs

    def _tokenizer(self, split_key: tuple) -> TextTokenizer:
        s = self.spec
        if s.tokenizer != "bpe":
            return load_tokenizer(s.tokenizer)
        folder = data_root() / "tokenizers" / digest("bpe", list(split_key), s.tokenizer_vocab, s.bpe_sample_chars)
        if not (folder / "special.json").is_file():
            with _locked(folder.with_name(folder.name + ".lock")):
                if not (folder / "special.json").is_file():
                    self._documents()  # a source that cannot be read fails before any message
                    self._say(f"training a byte-level BPE of {s.tokenizer_vocab} tokens on data source "
                              f"'{s.source}' into {folder} (once; reused after)")
                    tokenizer = train_bpe(self._sample(), s.tokenizer_vocab)
                    atomic_write_folder(folder, tokenizer.save)
        return TextTokenizer.load(folder)

    def _sample(self) -> Iterator[str]:
        """Train documents, in order, up to `bpe_sample_chars` characters: what the BPE learns from."""
        budget = self.spec.bpe_sample_chars
        for doc in self._documents()["train"]:
            if budget <= 0:
                return
            yield doc.text[:budget]
            budget -= len(doc.text)
