"""What the teacher-state cache saves: teacher forward passes and time, epoch by epoch.

A tiny random teacher (our standard model, or the same weights in Hugging Face's
`LlamaForCausalLM`) is read at its last layer over `rows` token rows of random lengths
(seq_len/2 to seq_len), in batches, for `epochs` epochs, two ways in turn each epoch:

- no cache: every batch runs the teacher (what a training loop does without the cache);
- cache: `TeacherStateCache.build` over all rows, then `get` of every batch. In epoch 1
  the build runs the teacher and writes the states; in every later epoch it finds them
  (it hashes every row to check) and reads them from the memory-mapped file.

Teacher forward passes are counted by a forward hook on its token embedding, so a count of 0
means the teacher never ran. Times are wall-clock seconds of each whole epoch; the cache
is written to a temporary folder and deleted afterwards. How much an epoch saves depends
on the teacher's size: a tiny teacher is cheap to run, a real one (SmolLM2-135M) is not,
while reading costs the same for both.
"""

from __future__ import annotations

import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from ..interop.teacher_cache import TeacherStateCache
from ..interop.teacher import Teacher
from ..model.config import ModelConfig
from ..precision import autocast, native_bf16, resolve_precision
from ..variants import build_model


@dataclass
class EpochRow:
    epoch: int
    no_cache_calls: int  # teacher forward passes in the epoch without the cache
    no_cache_s: float
    cache_calls: int  # ... and with it
    cache_s: float

    @property
    def ratio(self) -> float:
        """Time of the epoch with the cache over the time without."""
        return self.cache_s / self.no_cache_s


def teacher_cache_epochs(*, d_model: int = 256, n_layers: int = 4, n_heads: int = 4, vocab_size: int = 512,
                         rows: int = 256, seq_len: int = 128, batch: int = 16, epochs: int = 3,
                         dtype: str = "float32", hf: bool = False) -> tuple[list[EpochRow], dict]:
    """(one row per epoch, facts of the run: teacher, tokens, cache size in bytes)."""
    cfg = ModelConfig(vocab_size=vocab_size, d_model=d_model, n_layers=n_layers, n_heads=n_heads, max_seq_len=seq_len)
    model = build_model(cfg, seed=0)
    if hf:
        from ..interop.hf_llama import to_hf_llama
        model = to_hf_llama(model, cfg)
    teacher = Teacher(model.eval(), layer=-1)
    calls = [0]
    teacher.model.embed.register_forward_hook(lambda *_: calls.__setitem__(0, calls[0] + 1))
    g = torch.Generator().manual_seed(0)
    lengths = torch.randint(max(seq_len // 2, 1), seq_len + 1, (rows,), generator=g)
    data = [torch.randint(0, vocab_size, (int(n),), generator=g) for n in lengths]
    batches = [list(range(start, min(start + batch, rows))) for start in range(0, rows, batch)]

    def no_cache() -> None:
        for b in batches:  # right-padded, as the cache pads its batches
            ids = torch.nn.utils.rnn.pad_sequence([data[i] for i in b], batch_first=True)
            mask = torch.nn.utils.rnn.pad_sequence([torch.ones_like(data[i]) for i in b], batch_first=True)
            teacher(ids, mask)

    def timed(fn) -> tuple[int, float]:
        calls[0] = 0
        start = time.perf_counter()
        fn()
        return calls[0], time.perf_counter() - start

    # The teacher's own speed in each precision, as `teacher.precision` would run it: bf16
    # autocast pays only where the CPU computes bf16 natively (`auto` picks it there).
    tokens = int(lengths.sum())
    speed = {}
    for precision in ("fp32", "bf16"):
        with autocast(torch.device("cpu"), precision):
            speed[precision] = tokens / timed(no_cache)[1]
    out = []
    with tempfile.TemporaryDirectory(prefix="modformer-teacher-cache-") as tmp:
        folder = Path(tmp) / "cache"

        def with_cache() -> None:
            cache = TeacherStateCache.build(teacher, "bench-teacher", data, folder, dtype=dtype, batch_size=batch)
            for b in batches:
                cache.get(b)

        for epoch in range(1, epochs + 1):
            out.append(EpochRow(epoch, *timed(no_cache), *timed(with_cache)))
        size = (folder / "states.npy").stat().st_size
    facts = {"teacher": "transformers LlamaForCausalLM" if hf else "modformer standard", "d_model": d_model,
             "n_layers": n_layers, "rows": rows, "tokens": tokens, "batches": len(batches),
             "dtype": dtype, "cache_bytes": size, "forward_tokens_per_s": speed,
             "native_bf16": native_bf16(torch.device("cpu")), "auto": resolve_precision("auto", torch.device("cpu"))}
    return out, facts


def markdown(rows: list[EpochRow], facts: dict, threads: int) -> str:
    lines = [f"torch {torch.__version__}, {threads} thread(s), CPU. Teacher: {facts['teacher']}, random weights, "
             f"d={facts['d_model']}, L={facts['n_layers']}, read at its last layer; {facts['rows']} rows, "
             f"{facts['tokens']:,} tokens, {facts['batches']} batches per epoch; cache {facts['dtype']}, "
             f"{facts['cache_bytes'] / 2 ** 20:,.2f} MiB on disk. Each epoch runs both ways in turn.", "",
             f"The teacher's forward pass over the rows, no cache: {facts['forward_tokens_per_s']['fp32']:,.0f} tokens/s "
             f"in float32, {facts['forward_tokens_per_s']['bf16']:,.0f} in bf16 autocast (bf16 / float32 = "
             f"{facts['forward_tokens_per_s']['bf16'] / facts['forward_tokens_per_s']['fp32']:.2f}); this CPU "
             f"{'computes' if facts['native_bf16'] else 'does not compute'} bf16 natively, so `precision: auto` "
             f"runs {facts['auto']} here.", "",
             "| epoch | teacher forwards, no cache | seconds | teacher forwards, cache | seconds | cache / no cache |",
             "|---|---|---|---|---|---|"]
    lines += [f"| {r.epoch} | {r.no_cache_calls} | {r.no_cache_s:.3f} | {r.cache_calls} | {r.cache_s:.3f} | "
              f"{r.ratio:.3f} |" for r in rows]
    return "\n".join(lines) + "\n"
