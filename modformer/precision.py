"""Which number format a forward pass computes in, chosen for the hardware it runs on.

`auto` (the default where it is offered) is bf16 autocast where the device computes bf16
natively (a GPU that supports it, a CPU whose oneDNN has bf16 kernels: AVX-512 with BF16 or
AMX), and float32 elsewhere: on a CPU with AVX2 only, bf16 autocast is emulated and was
measured six times slower than float32 (issue 16). Runs record the precision they used.
"""

from __future__ import annotations

from typing import Literal, get_args
import contextlib
import functools

import torch

Precision = Literal["auto", "fp32", "bf16"]
PRECISIONS = get_args(Precision)


@functools.lru_cache(maxsize=None)  # asked at every training step under `auto`; the hardware does not change
def native_bf16(device: torch.device) -> bool:
    if device.type == "cuda":
        return torch.cuda.is_bf16_supported()
    if device.type == "cpu":
        try:
            return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
        except (AttributeError, RuntimeError):  # a build without oneDNN
            return False
    return False


def resolve_precision(precision: str, device: torch.device) -> str:
    """fp32 or bf16: `auto` decided for `device`, the others as they are."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {', '.join(PRECISIONS)}, got '{precision}'")
    if precision == "auto":
        return "bf16" if native_bf16(device) else "fp32"
    return precision


def autocast(device: torch.device, precision: str):
    """A context computing matmuls in bf16 when `precision` resolves to bf16 on `device`."""
    if resolve_precision(precision, device) == "bf16":
        return torch.autocast(device.type, dtype=torch.bfloat16)
    return contextlib.nullcontext()
