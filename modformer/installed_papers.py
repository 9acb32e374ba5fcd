"""Which papers are installed: the table `modformer.plugins` fills when it loads the entry
points of the group `modformer.papers`, kept at the bottom of the library so that any layer
may read it (a sweep refusing an unknown `sweep.paper`, a run recording its papers' versions)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .plugins import Paper

PAPERS: dict[str, Paper] = {}  # name -> a loaded paper
BROKEN: dict[str, str] = {}  # name -> why its entry point did not load, in one line


def paper_versions() -> dict[str, dict[str, str]]:
    """Every loaded paper -> where its code came from (its `register`'s import path and
    version, `version.source_version`), as run.json records it."""
    return {name: paper.source for name, paper in sorted(PAPERS.items())}
