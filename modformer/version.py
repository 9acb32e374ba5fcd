"""What every run records about how it was made: the code version (also in every
checkpoint) and the machine it ran on."""

from __future__ import annotations

import functools
import os
import platform
import subprocess
from pathlib import Path

__version__ = "0.1.0"


# Committed records, which a run in a checkout may be adding to: changing them changes no code.
RECORDS = "results"


# The format of the records a sweep and a run write (sweep.yaml's and run.json's `format`):
# records without it were written before 2026-12-06 (format 1); format 2 (to 2026-12-07) kept
# the built-in mixers' options in the sections model.attention and model.mixing (now each
# mixer's own options); format 3 (2026-12-07) kept the random-attention reference's residual
# and skip scales and scaled projections as keys of the model config (now that construction's
# options) and named a grid point with a list or mapping value by its Python text, brackets
# and quotes made `_` (now plainly: modformer/point_names.py); `modformer migrate DIR` brings
# them up to date (modformer/migrate.py).
RECORDS_FORMAT = 4


def records_format_problem(written: object, folder: object) -> str | None:
    """Why a folder whose records say format `written` is not read by this modformer, naming
    the command that brings it up to date; None where it is today's format."""
    if written == RECORDS_FORMAT:
        return None
    return (f"{folder} holds records of format {written}, not this modformer's {RECORDS_FORMAT}: bring it up to "
            f"date once with `modformer migrate {folder}`")


@functools.lru_cache(maxsize=1)
def code_version() -> str:
    """`0.1.0+<git commit>[-dirty]` inside a git checkout, else the package version. `-dirty`
    means a tracked file other than the committed records (`results/`) differs from the
    commit: a sweep that extends a committed results folder changes tracked files there,
    and the runs it trains are still the commit's code."""
    root = Path(__file__).resolve().parent.parent
    try:
        out = subprocess.run(["git", "describe", "--always", "--abbrev=12"], cwd=root,
                             capture_output=True, text=True, timeout=5)
        commit = out.stdout.strip() if out.returncode == 0 else ""
        return f"{__version__}+{commit}{'-dirty' if changed_code(root) else ''}" if commit else __version__
    except (OSError, subprocess.SubprocessError):
        return __version__


def changed_code(root: Path) -> bool:
    """Whether a tracked file of the checkout at `root`, outside `RECORDS`, differs from HEAD."""
    out = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "--", ".",
                          f":(exclude){RECORDS}"], cwd=root, capture_output=True, text=True, timeout=5)
    return out.returncode != 0 or bool(out.stdout.strip())


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


def source_version(obj: object) -> dict[str, str]:
    """Where a part (a class, function or variant) came from and which version of it:
    {"import_path": "package.module:Name", "version": ...}, the version being this library's
    code version for a part of ours, `<distribution> <version>` for one an installed package
    holds, else a hash of its module file's content (`sha256:<16 hex> <file>`), so that a run
    records which code built it even for a file next to the config."""
    import hashlib
    import importlib.metadata as metadata
    import sys

    target = obj if callable(obj) else getattr(obj, "build", obj)  # a variant: its builder
    module_name, name = target.__module__, target.__qualname__
    found = {"import_path": f"{module_name}:{name}"}
    if module_name.split(".")[0] == "modformer":
        return {**found, "version": code_version()}
    file = getattr(sys.modules.get(module_name), "__file__", None)
    if file is None:
        return {**found, "version": "unknown (no module file)"}
    path = Path(file).resolve()
    for dist_name in metadata.packages_distributions().get(module_name.split(".")[0], []):
        try:
            dist = metadata.distribution(dist_name)
        except metadata.PackageNotFoundError:
            continue
        # Only where the distribution's own files hold the module: not a checkout on sys.path
        # shadowing it, nor an editable install (whose files are the checkout's, hashed below).
        if any(Path(dist.locate_file(f)).resolve() == path for f in dist.files or ()):
            return {**found, "version": f"{dist.metadata['Name']} {dist.version}"}
    try:
        digest = hashlib.sha256(path.read_bytes()).hexdigest()[:16]
    except OSError:
        return {**found, "version": f"unknown (cannot read {path})"}
    return {**found, "version": f"sha256:{digest} {path}"}
