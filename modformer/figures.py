"""Matplotlib set up for files only, and atomic PNG writing shared by every plot."""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

from .files import atomic_write

__all__ = ["plt", "save_figure"]


class _Pyplot:
    """`matplotlib.pyplot`, imported at its first use with the file-only backend: importing it
    costs about half a second, which every command (`--help`, a refused config, each sweep
    worker) would otherwise pay before it draws anything, if it draws at all."""

    _module: Any = None

    def __getattr__(self, name: str) -> Any:
        if _Pyplot._module is None:
            importlib.import_module("matplotlib").use("Agg")  # files only; never needs a display
            _Pyplot._module = importlib.import_module("matplotlib.pyplot")
        return getattr(_Pyplot._module, name)


plt: Any = _Pyplot()


def save_figure(fig: "plt.Figure", path: str | Path, dpi: int = 100) -> Path:
    """Write `fig` as PNG to `path` atomically (temporary file, then rename), and close it."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        # The temporary name does not end in .png, so the format is given explicitly.
        atomic_write(path, lambda tmp: fig.savefig(tmp, format="png", dpi=dpi))
    finally:
        plt.close(fig)
    return path
