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
    """The CPU's model name, the CPUs this process may use and the vector instructions torch's
    kernels use there (AVX512 or AVX2, on which speed depends), plus the GPU where CUDA is
    available, e.g. 'Intel(R) Xeon(R) Processor, 2 CPUs, AVX512': the machine a run's times
    and MFUs are for, since machines of one kind differ by up to 2x. (The precision a run
    computed in is in its summary.)"""
    import torch  # here, so that importing the version does not import torch

    cpu = platform.processor() or platform.machine()
    try:  # Linux names the model only here (platform.processor() is empty there)
        cpu = next((line.partition(":")[2].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                    if line.startswith("model name")), cpu)
    except OSError:
        pass
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    parts = [cpu or "unknown CPU", f"{cpus} CPUs", torch.backends.cpu.get_cpu_capability()]
    if torch.cuda.is_available():
        parts.append(torch.cuda.get_device_name())
    return ", ".join(parts)
