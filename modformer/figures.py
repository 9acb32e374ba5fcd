"""Matplotlib set up for files only, and atomic PNG writing shared by every plot."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only; never needs a display
import matplotlib.pyplot as plt  # noqa: E402

from .files import atomic_write  # noqa: E402

__all__ = ["plt", "save_figure"]


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
