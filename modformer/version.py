"""What every run records about how it was made: the code version (also in every
checkpoint) and the machine it ran on."""

from __future__ import annotations

import functools
import os
import platform
import subprocess
from pathlib import Path

__version__ = "0.1.0"


@functools.lru_cache(maxsize=1)
def code_version() -> str:
    """`0.1.0+<git commit>[-dirty]` inside a git checkout, else the package version."""
    root = Path(__file__).resolve().parent.parent
    try:
        out = subprocess.run(["git", "describe", "--always", "--dirty", "--abbrev=12"], cwd=root,
                             capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.SubprocessError):
        return __version__
    return f"{__version__}+{out.stdout.strip()}" if out.returncode == 0 and out.stdout.strip() else __version__


@functools.lru_cache(maxsize=1)
def machine() -> str:
    """The CPU's model name, the CPUs this process may use and whether it has AVX-512 and
    AMX (on which float32 and bf16 speed depend), plus the GPU where CUDA is available, e.g.
    'Intel(R) Xeon(R) Processor, 2 CPUs, AVX-512, AMX': the machine a run's times and MFUs
    are for, since machines of one kind differ by up to 2x."""
    cpu, flags = platform.processor() or platform.machine(), set()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name":
                cpu = value.strip()
            elif key.strip() == "flags":
                flags = set(value.split())
                break
    except OSError:
        pass
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    parts = [cpu or "unknown CPU", f"{cpus} CPUs"]
    if flags:  # unknown without /proc/cpuinfo: say nothing rather than "no AVX-512"
        parts += ["AVX-512" if "avx512f" in flags else "no AVX-512"] + (["AMX"] if "amx_tile" in flags else [])
    import torch  # here, so that importing the version does not import torch

    if torch.cuda.is_available():
        parts.append(torch.cuda.get_device_name())
    return ", ".join(parts)
