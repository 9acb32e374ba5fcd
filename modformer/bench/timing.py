"""Interleaved timing: contenders run in turn, repeat after repeat (in alternating order), so
that a machine that slows down or speeds up (other jobs, frequency scaling) affects each
contender alike; the median of the repeats is reported."""

from __future__ import annotations

import statistics
import time
from typing import Callable


def time_interleaved(contenders: dict[str, Callable[[], object]], *, repeats: int = 15, warmup: int = 3,
                     inner: int = 1) -> dict[str, float]:
    """Median seconds per call of each contender; every repeat times `inner` calls of each,
    in turn. Warm-up calls (allocator, caches, lazy init) are not timed."""
    if repeats < 1 or inner < 1:
        raise ValueError(f"repeats and inner must be positive, got {repeats}, {inner}")
    for fn in contenders.values():
        for _ in range(warmup):
            fn()
    samples: dict[str, list[float]] = {name: [] for name in contenders}
    order = list(contenders.items())
    for repeat in range(repeats):
        # Alternate who goes first, so that neither always runs on the other's warm caches.
        for name, fn in (order if repeat % 2 == 0 else order[::-1]):
            start = time.perf_counter()
            for _ in range(inner):
                fn()
            samples[name].append((time.perf_counter() - start) / inner)
    return {name: statistics.median(values) for name, values in samples.items()}
