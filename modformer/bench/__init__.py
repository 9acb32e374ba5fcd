"""Benchmarks that compare side by side in one process (ratios, not absolute timings).

`modformer bench knowledge`: a knowledge layer against the FFN it folds into.
"""

from .command import add_bench_command

__all__ = ["add_bench_command"]
