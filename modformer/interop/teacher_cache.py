"""Teacher states computed once per (teacher, layer, token data) and read from disk after.

The teacher's forward pass is the slowest thing here (SmolLM2-135M: about 200 tokens/s on
this CPU), so every epoch, seed and arm reads the same states from a memory-mapped file
instead. Layout of a cache folder:

    states.npy   (total tokens, d_teacher) float32, or bf16 stored as uint16 bit patterns
    index.json   fingerprint, per-row offsets and lengths, dtype

Rows have their own lengths (no padding is stored); `get(rows)` pads a batch. The
fingerprint hashes the teacher's name, the layer, the dtype, the precision of the teacher's
forward pass (as resolved on this machine: `auto` is fp32 on one CPU and bf16 on another,
and their states differ) and every row's token ids, so a cache built for other data,
another teacher or another precision is rebuilt, never silently reused. The
folder is written beside and renamed into place: a killed build leaves no half cache.
Each layer has its folder; the layers a reader needs are computed from one teacher pass
(`build_layers`).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Sequence

import numpy as np
import torch
from tqdm import tqdm

from ..errors import ModformerError
from ..lock import take_lock
from ..files import atomic_write_folders
from ..precision import autocast, resolve_precision

DTYPES = ("float32", "bf16")
CACHE_FILES = {"index.json", "states.npy"}


def fingerprint(teacher_name: str, layer: int, dtype: str, rows: Sequence[torch.Tensor],
                keep: Sequence[int | None] | None = None, precision: str = "fp32") -> str:
    """The cache key; `precision` is the teacher forward's, resolved (fp32 or bf16).

    Args:
        teacher_name: the teacher's name (e.g. its Hugging Face id).
        layer: the teacher layer whose states are cached.
        dtype: the stored dtype, `float32` or `bf16`.
        rows: every row's token ids, 1-d tensors, in order.
        keep: per row, how many trailing states are stored (None: all), or None for all rows.
        precision: the teacher forward's precision as resolved on this machine (fp32 or bf16).

    Returns:
        32 hex digits of a SHA-256 over all of these.
    """
    h = hashlib.sha256(f"{teacher_name}|{layer}|{dtype}|{precision}|{len(rows)}".encode())
    for row in rows:
        h.update(np.asarray(row.cpu(), dtype=np.int64).tobytes())
        h.update(b"|")
    if keep is not None:
        h.update(json.dumps(list(keep)).encode())
    return h.hexdigest()[:32]


class TeacherStateCache:
    """A teacher's states of many token sequences, stored once on disk (memory-mapped) and read
    by row; made with `build` or `build_layers`, which reuse a folder holding the same rows.

    Args:
        folder: the cache folder (states.npy and its index).
        index: the folder's index: each row's offset and length, the dtype, what made it.
    """

    def __init__(self, folder: Path, index: dict):
        self.folder, self.index = folder, index
        self.states = np.load(folder / "states.npy", mmap_mode="r")
        self.offsets = np.asarray(index["offsets"], dtype=np.int64)
        self.lengths = np.asarray(index["lengths"], dtype=np.int64)

    def __len__(self) -> int:
        return len(self.lengths)

    def get(self, rows: Sequence[int]) -> tuple[torch.Tensor, torch.Tensor]:
        """(states (B, U_max, d) float32 zero-padded, lengths (B,)) of the given rows."""
        lengths = self.lengths[list(rows)]
        out = torch.zeros(len(rows), int(lengths.max(initial=0)), self.states.shape[1])
        for i, r in enumerate(rows):
            chunk = torch.from_numpy(np.array(self.states[self.offsets[r]:self.offsets[r] + self.lengths[r]]))
            out[i, :len(chunk)] = chunk.view(torch.bfloat16).float() if self.index["dtype"] == "bf16" else chunk
        return out, torch.from_numpy(lengths)

    @classmethod
    def build(cls, teacher, teacher_name: str, rows: Sequence[torch.Tensor], folder: str | Path, *,
              dtype: str = "float32", batch_size: int = 8, keep: Sequence[int | None] | None = None,
              precision: str = "fp32") -> "TeacherStateCache":
        """The cache of `teacher`'s states (of its layer) for `rows` (1-d token-id tensors) in
        `folder`: read if it holds these exact rows for this teacher and layer, else computed and
        written. `keep[i]`, when given and not None, stores only the last keep[i] states of row i
        (the tail of a prefix whose other states the cache holds already). `precision`: the
        teacher's forward pass (fp32, bf16 autocast, or auto: bf16 where the CPU computes it)."""
        return cls.build_layers(teacher, teacher_name, rows, {teacher.layer: folder}, dtype=dtype,
                                batch_size=batch_size, keep=keep, precision=precision)[teacher.layer]

    @classmethod
    def build_layers(cls, teacher, teacher_name: str, rows: Sequence[torch.Tensor], folders: dict[int, str | Path],
                     *, dtype: str = "float32", batch_size: int = 8, keep: Sequence[int | None] | None = None,
                     precision: str = "fp32") -> dict[int, "TeacherStateCache"]:
        """`build` for several layers at once: layer -> its cache in folders[layer]. The layers
        not cached yet are computed together, from one teacher pass over the rows. Builds in
        one cache folder take turns (a lock file there): a process that finds another building
        waits and then reads its caches, rather than computing them again and putting its
        copy in place under a reader (a sweep's workers start together)."""
        if dtype not in DTYPES:
            raise ModformerError(f"teacher cache dtype must be one of {', '.join(DTYPES)}, got {dtype!r}")
        folders = {layer: Path(folder) for layer, folder in folders.items()}
        parent = next(iter(folders.values())).parent if folders else None
        if parent is None:
            return {}
        device = next(teacher.parameters()).device
        precision = resolve_precision(precision, device)
        keys = {layer: fingerprint(teacher_name, layer, dtype, rows, keep, precision) for layer in folders}
        ready = {layer: cls._open(folders[layer], keys[layer]) for layer in folders}
        if all(cache is not None for cache in ready.values()):  # a read-only shared cache needs no lock
            return ready
        parent.mkdir(parents=True, exist_ok=True)
        with take_lock(parent / ".build.lock", wait=True):
            return cls._build_layers(teacher, teacher_name, rows, folders, keys, dtype=dtype, batch_size=batch_size,
                                     keep=keep, precision=precision, device=device)

    @classmethod
    def _build_layers(cls, teacher, teacher_name: str, rows: Sequence[torch.Tensor], folders: dict[int, Path],
                      keys: dict[int, str], *, dtype: str, batch_size: int, keep: Sequence[int | None] | None,
                      precision: str, device: torch.device) -> dict[int, "TeacherStateCache"]:
        """`build_layers` under the lock: the caches read again (another builder may have just
        written them), those still missing computed and written."""
        caches = {layer: cls._open(folders[layer], keys[layer]) for layer in folders}
        missing = [layer for layer, cache in caches.items() if cache is None]
        for layer in missing:
            folder = folders[layer]
            if folder.exists() and (not folder.is_dir() or set(p.name for p in folder.iterdir()) - CACHE_FILES):
                raise ModformerError(f"{folder} exists and is not a teacher-state cache; choose another folder")
        if not missing:
            return caches
        kept = [len(r) if keep is None or keep[i] is None else keep[i] for i, r in enumerate(rows)]
        lengths = kept
        offsets = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64) if rows else np.zeros(0, np.int64)
        index = {layer: {"fingerprint": keys[layer], "teacher": teacher_name, "layer": layer, "dtype": dtype,
                         "precision": precision, "offsets": offsets.tolist(), "lengths": lengths} for layer in missing}

        def write(partials: list[Path]) -> None:
            files = [np.lib.format.open_memmap(partial / "states.npy", mode="w+",
                                               dtype=np.float32 if dtype == "float32" else np.uint16,
                                               shape=(sum(lengths), teacher.width)) for partial in partials]
            starts = range(0, len(rows), batch_size)
            # The teacher is the slow part (minutes for tens of thousands of tokens on a CPU): show it.
            for start in tqdm(starts, desc=f"teacher states of {teacher_name}", unit="batch", disable=None):
                batch = rows[start:start + batch_size]
                width = max(len(r) for r in batch)
                ids = torch.zeros(len(batch), width, dtype=torch.long)
                mask = torch.zeros(len(batch), width, dtype=torch.long)
                for i, r in enumerate(batch):
                    ids[i, :len(r)], mask[i, :len(r)] = r, 1
                # right padding: a causal teacher's real positions ignore it
                with autocast(device, precision):
                    hidden_states = teacher.hidden(ids, mask, missing)
                for states, hidden in zip(files, hidden_states):
                    hidden = hidden.cpu()
                    for i, r in enumerate(batch):
                        row = hidden[i, len(r) - kept[start + i]:len(r)]
                        o = offsets[start + i]
                        states[o:o + len(row)] = (row.numpy() if dtype == "float32"
                                                else row.to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16))
            for states, partial, layer in zip(files, partials, missing):
                states.flush()
                (partial / "index.json").write_text(json.dumps(index[layer]))
            del files

        try:
            atomic_write_folders([folders[layer] for layer in missing], write)  # replaces stale caches of ours
        except OSError:  # another process put its caches there first: use them if they are these
            for layer in missing:
                caches[layer] = cls._open(folders[layer], keys[layer])
                if caches[layer] is None:
                    raise ModformerError(f"cannot write the teacher-state cache {folders[layer]}") from None
            return caches
        return {layer: cache if cache is not None else cls(folders[layer], index[layer])
                for layer, cache in caches.items()}

    @classmethod
    def _open(cls, folder: Path, key: str) -> "TeacherStateCache | None":
        """The cache in `folder` if it is complete and holds `key`'s states, else None."""
        try:
            index = json.loads((folder / "index.json").read_text())
            if index.get("fingerprint") != key:
                return None
            cache = cls(folder, index)
            if cache.states.shape[0] != int(sum(index["lengths"])):
                return None
            return cache
        except (OSError, ValueError, KeyError, EOFError):  # missing, truncated or foreign files: rebuild
            return None
