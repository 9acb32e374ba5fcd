"""Benchmarks that compare side by side in one process (ratios, not absolute timings).

`modformer bench knowledge`: a knowledge layer against the FFN it folds into.
`modformer bench llama`: training throughput, MFU and peak memory of our models against
Hugging Face Llama (optionally with activation checkpointing and torch.compile).
`modformer bench scaling`: the same as width, depth and sequence length grow.
`modformer bench teacher-cache`: teacher forward passes and time per epoch with and
without the teacher-state cache.
"""

from .command import bench_arguments

__all__ = ["bench_arguments"]
