"""The code version recorded in every run directory and checkpoint."""

from __future__ import annotations

import functools
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
