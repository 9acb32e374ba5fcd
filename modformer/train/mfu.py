"""Model FLOPs utilisation: a training's useful work per second against the machine's peak.

The useful work is the model's training FLOPs per token, 6 N + c L T d (N: the matrix
parameters of the blocks and the head, the embedding being a lookup; the second term the
mixing over T tokens: c = 12 for attention's scores and weighted sum, 6 for MixiT's fixed
mixing, which has no scores). It is the model's own count where its parts are ours and
known (`flops_per_token`), and otherwise (a mixer or feed-forward module of yours, the
knowledge variant's reads) the standard model's of the same sizes, labelled as such in
`flops_of`: an estimate, since what such a part computes is not known here. Frozen parts
count as trained ones (the usual convention: their input gradients are computed anyway).
The peak is a square float32 (or bf16) matrix multiply timed on the same device and thread
count as the training (on a CPU by the process's CPU time, so that other processes sharing
the cores do not lower it), so the figure is about the machine the run ran on.
"""

from __future__ import annotations

import time
from typing import Any

import torch

from ..model.config import ModelConfig
from ..variants.stack import layer_plan


def matmul_peak(precision: str, size: int = 2048, repeats: int = 5,
                device: torch.device | str = "cpu", seconds: float | None = None) -> float:
    """FLOP/s of a (size, size) @ (size, size) multiply in float32 or bf16, best of `repeats`.

    `seconds`: at most about this long a multiply. The size then shrinks (to a multiple of 64,
    at least 128) where the hardware is slower than that: bf16 on a CPU without it is emulated
    at ~1/20 of float32's speed, and a 1024 multiply there took 7 s where float32 took 0.05."""
    dtype = torch.bfloat16 if precision == "bf16" else torch.float32
    device = torch.device(device)
    if seconds is not None:
        probe = 128
        a = torch.randn(probe, probe, dtype=dtype, device=device)
        a @ a  # warms the kernels
        rate = 2 * probe ** 3 / max(_timed_multiply(a, a, device), 1e-9)
        size = min(size, max(probe, int((seconds * rate / 2) ** (1 / 3)) // 64 * 64))
    a = torch.randn(size, size, dtype=dtype, device=device)
    b = torch.randn(size, size, dtype=dtype, device=device)
    _timed_multiply(a, b, device)  # the first multiply allocates and warms the kernels
    return 2 * size ** 3 / min(_timed_multiply(a, b, device) for _ in range(repeats))


def _timed_multiply(a: torch.Tensor, b: torch.Tensor, device: torch.device) -> float:
    """Seconds of one `a @ b`."""
    if device.type == "cuda":
        start = time.perf_counter()
        a @ b
        torch.cuda.synchronize(device)
        return time.perf_counter() - start
    # The CPU time of the process over its threads, not the wall time: another process on the
    # same cores (a sweep's other workers) would otherwise lower the peak measured and raise
    # every MFU; its cost shows instead in the run's tokens/s, which is wall time.
    start_wall, start_cpu = time.perf_counter(), time.process_time()
    a @ b
    wall, cpu = time.perf_counter() - start_wall, time.process_time() - start_cpu
    return min(wall, cpu / torch.get_num_threads())


# Our feed-forward modules and their matrices of d x d_ff.
FFN_MATRICES = {"swiglu": 3, "shaped_leaky_glu": 3, "relu": 2, "gelu": 2, "silu": 2, "shaped_leaky_relu": 2}
MIXER_COST = {"attention": 12, "mixing": 6}  # c of c L T d


def _flops(cfg: ModelConfig, seq_len: int, layers: list[tuple[str, int]]) -> float:
    """6 N + sum over layers of c T d, for blocks of (mixer, d x d_ff matrices of the
    feed-forward module), bottom first."""
    d = cfg.d_model
    matrix_params = d * cfg.vocab_size  # the head; the embedding is a lookup
    mixing = 0.0
    for mixer, ffn_matrices in layers:
        matrix_params += 2 * d * d + (2 * d * cfg.head_dim * cfg.kv_heads if mixer == "attention" else 0)  # q, o (+ k, v)
        matrix_params += ffn_matrices * d * cfg.ffn_dim
        mixing += MIXER_COST[mixer] * seq_len * d
    return 6 * matrix_params + mixing


def training_flops_per_token(cfg: ModelConfig, seq_len: int) -> float:
    """The standard model's forward and backward FLOPs per token at sequence length `seq_len`."""
    return _flops(cfg, seq_len, [("attention", FFN_MATRICES["swiglu"])] * cfg.n_layers)


OWN, STANDARD = "this model's", "the standard model's of the same sizes (an estimate: this model's parts are not known)"


def flops_per_token(cfg: ModelConfig, seq_len: int, *, builds_own_ffn: bool = False) -> tuple[float, str]:
    """(training FLOPs per token, whose FLOPs they are: OWN or STANDARD), see the module's note;
    a per-layer stack (`model.layers`) counts each layer's own parts.
    `builds_own_ffn`: the variant builds other feed-forward modules than model.ffn (knowledge)."""
    plan = layer_plan(cfg)
    if builds_own_ffn or any(layer.mixer not in MIXER_COST or layer.ffn not in FFN_MATRICES for layer in plan):
        return training_flops_per_token(cfg, seq_len), STANDARD
    return _flops(cfg, seq_len, [(layer.mixer, FFN_MATRICES[layer.ffn]) for layer in plan]), OWN


def utilisation(cfg: ModelConfig, seq_len: int, tokens_per_s: float, precision: str,
                device: torch.device, processes: int = 1, *, builds_own_ffn: bool = False) -> dict[str, Any]:
    """What a run's summary records: FLOPs per token and whose they are (`flops_of`), the peak
    measured now (per process, a smaller multiply than `modformer bench`'s, and smaller still
    where one would take over 50 ms, so that every run can afford it) and the MFU of
    `tokens_per_s` (tokens of all `processes` together)."""
    flops, flops_of = flops_per_token(cfg, seq_len, builds_own_ffn=builds_own_ffn)
    peak = matmul_peak(precision, size=1024, repeats=3, device=device, seconds=0.05)
    return {"flops_per_token": flops, "flops_of": flops_of, "seq_len": seq_len, "matmul_peak_gflops": peak / 1e9,
            "mfu": tokens_per_s * flops / (peak * processes)}
