"""Tokenized text as memory-mapped shards, built once, resumably, and read without copying.

A store folder holds one subfolder per split (`train`, `validation`, `test`), each a
sequence of shards `00000`, `00001`, ...; shard k holds units k*S .. (k+1)*S - 1 of its
split (a unit is a document, or a line of one), as three NumPy files:

    tokens.npy   (n_tokens,)  uint16, or uint32 for vocabularies over 65,536: every
                              unit's tokens followed by end-of-text, concatenated
    offsets.npy  (units + 1,) int64: unit i is tokens[offsets[i]:offsets[i + 1]]
    labels.npy   (units,)     int64: each unit's class, -1 when the source has none

A split's token stream is its shards' tokens concatenated: exactly the units' tokens in
order, each followed by end-of-text. `plan.json` (written first) fixes the units per split
and per shard; each shard is written atomically, so an interrupted build resumes at the
first missing shard; `meta.json`, written last, marks the store complete.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Callable

import numpy as np
from tqdm import tqdm

from ..files import atomic_write_folder, atomic_write_text
from .sources import Document
from .tokenizer import TextTokenizer

SPLITS = ("train", "validation", "test")
SHARD_UNITS = 4096  # units per shard: a few MB of tokens for documents, well under for lines


def token_dtype(vocab_size: int) -> np.dtype:
    return np.dtype(np.uint16) if vocab_size <= 1 << 16 else np.dtype(np.uint32)


class TokenSplit:
    """One split of a store: its shards memory-mapped, read as one stream or unit by unit."""

    def __init__(self, folder: Path, shards: int):
        self.tokens = [np.load(folder / f"{k:05d}" / "tokens.npy", mmap_mode="r") for k in range(shards)]
        self.offsets = [np.load(folder / f"{k:05d}" / "offsets.npy") for k in range(shards)]
        self.labels = np.concatenate([np.load(folder / f"{k:05d}" / "labels.npy") for k in range(shards)]) \
            if shards else np.zeros(0, dtype=np.int64)
        self.token_starts = np.cumsum([0] + [len(t) for t in self.tokens])  # (shards + 1,) stream offsets
        self.unit_starts = np.cumsum([0] + [len(o) - 1 for o in self.offsets])  # (shards + 1,)

    @property
    def num_tokens(self) -> int:
        return int(self.token_starts[-1])

    @property
    def num_units(self) -> int:
        return int(self.unit_starts[-1])

    def read(self, start: int, stop: int) -> np.ndarray:
        """Tokens start..stop - 1 of the split's stream, (stop - start,) int64, across shards."""
        if not 0 <= start <= stop <= self.num_tokens:
            raise IndexError(f"tokens {start}..{stop} of a stream of {self.num_tokens}")
        pieces = []
        k = int(np.searchsorted(self.token_starts, start, side="right")) - 1
        while start < stop:
            base = int(self.token_starts[k])
            end = min(stop, int(self.token_starts[k + 1]))
            pieces.append(self.tokens[k][start - base:end - base])
            start, k = end, k + 1
        return np.concatenate(pieces).astype(np.int64) if pieces else np.zeros(0, dtype=np.int64)

    def unit(self, i: int) -> np.ndarray:
        """Unit i's tokens, end-of-text included, (length,) int64."""
        k = int(np.searchsorted(self.unit_starts, i, side="right")) - 1
        j = i - int(self.unit_starts[k])
        return self.tokens[k][self.offsets[k][j]:self.offsets[k][j + 1]].astype(np.int64)

    def unit_lengths(self) -> np.ndarray:
        """(units,) int64 tokens of each unit, end-of-text included."""
        return np.concatenate([np.diff(o) for o in self.offsets]) if self.offsets else np.zeros(0, dtype=np.int64)


class TokenStore:
    """A complete store: its splits and what it was built with (`meta`)."""

    def __init__(self, folder: Path):
        self.folder = Path(folder)
        self.meta = json.loads((self.folder / "meta.json").read_text())
        self.splits = {name: TokenSplit(self.folder / name, self.meta["splits"][name]["shards"]) for name in SPLITS}

    @staticmethod
    def complete(folder: Path) -> bool:
        return (Path(folder) / "meta.json").is_file()


def build_store(folder: Path, units: Callable[[], dict[str, list[Document]]], tokenizer: TextTokenizer, *,
                identity: dict, shard_units: int = SHARD_UNITS, progress: bool = True) -> TokenStore:
    """Tokenize every split's units into `folder`, skipping shards an earlier build finished.

    `units()` gives {split: [Document]} (called only if some shard is missing); `identity`
    describes the build (recorded in plan.json; a plan that differs starts over)."""
    folder = Path(folder)
    if TokenStore.complete(folder):
        return TokenStore(folder)
    folder.mkdir(parents=True, exist_ok=True)
    dtype = token_dtype(tokenizer.vocab_size)
    data = units()
    plan = {"identity": identity, "shard_units": shard_units, "dtype": dtype.name,
            "units": {name: len(data[name]) for name in SPLITS}}
    plan_path = folder / "plan.json"
    if plan_path.is_file() and json.loads(plan_path.read_text()) != plan:
        for name in SPLITS:  # another plan's shards would not fit this one
            shutil.rmtree(folder / name, ignore_errors=True)
    atomic_write_text(plan_path, json.dumps(plan, indent=1) + "\n")
    meta_splits = {}
    total = sum(plan["units"].values())
    with tqdm(total=total, desc=f"tokenizing {folder.name[:8]}", unit="unit", disable=not progress or None,
              leave=False) as bar:
        for name in SPLITS:
            docs = data[name]
            shards = max(1, -(-len(docs) // shard_units))
            tokens = 0
            for k in range(shards):
                chunk = docs[k * shard_units:(k + 1) * shard_units]
                path = folder / name / f"{k:05d}"
                if not (path / "tokens.npy").is_file():
                    path.parent.mkdir(parents=True, exist_ok=True)
                    atomic_write_folder(path, lambda tmp, chunk=chunk: _write_shard(tmp, chunk, tokenizer, dtype))
                tokens += len(np.load(path / "tokens.npy", mmap_mode="r"))
                bar.update(len(chunk))
            meta_splits[name] = {"shards": shards, "units": len(docs), "tokens": tokens}
    atomic_write_text(folder / "meta.json", json.dumps({**plan, "splits": meta_splits,
                                                        "vocab_size": tokenizer.vocab_size}, indent=1) + "\n")
    return TokenStore(folder)


def _write_shard(folder: Path, docs: list[Document], tokenizer: TextTokenizer, dtype: np.dtype) -> None:
    encoded = tokenizer.encode_batch([d.text for d in docs]) if docs else []
    lengths = np.array([len(ids) + 1 for ids in encoded], dtype=np.int64)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    tokens = np.empty(int(offsets[-1]), dtype=dtype)
    for ids, start in zip(encoded, offsets[:-1]):
        tokens[start:start + len(ids)] = ids
        tokens[start + len(ids)] = tokenizer.eos_id
    np.save(folder / "tokens.npy", tokens)
    np.save(folder / "offsets.npy", offsets)
    np.save(folder / "labels.npy", np.array([-1 if d.label is None else d.label for d in docs], dtype=np.int64))
