"""Benchmarks that compare side by side in one process (ratios, not absolute timings).

`modformer bench knowledge`: a knowledge layer against the FFN it folds into.
`modformer bench llama`: training throughput, MFU and peak memory of our models against
Hugging Face Llama (optionally with activation checkpointing and torch.compile).
`modformer bench scaling`: the same as width, depth and sequence length grow.
`modformer bench teacher-cache`: teacher forward passes and time per epoch with and
without the teacher-state cache.
`modformer bench bridged-inference`: generation speed and memory of a student alone, reading a
frozen teacher through a bridge (the teacher's states kept or recomputed), and the teacher alone.
"""

from .command import bench_arguments

__all__ = ["bench_arguments"]
