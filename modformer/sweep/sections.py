"""What a paper's experiments add to the reports and curves of their sweeps.

The library's reports say nothing of any paper. A paper (a plugin: modformer/plugins.py)
registers here, through its `Paper`, under its name, the report sections its experiments need (e.g. each run's budget as a
fraction of what the paper's reference scripts train) and a mark for budget curves (that
budget, drawn as a line). A sweep is one of a paper's experiments when its runs are built
with a construction that serves the paper (`Construction.paper`) or its sweep file names
the paper (`sweep.paper`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from ..constructions import construction_paper
from ..errors import ConfigError
from ..installed_papers import BROKEN, PAPERS

# paper -> its sections: fn(sweep_dir, variants, groups, chosen) -> Markdown lines ([] for none).
Section = Callable[[Path, list[str], dict, dict], list[str]]
SECTIONS: dict[str, list[Section]] = {}
# paper -> fn(config, axis) -> (x, label) of the line a curve of that config's runs marks, or None;
# axis is "amount" (what a run trained on, in its task's unit) or "width".
Mark = Callable[[dict[str, Any], str], "tuple[float, str] | None"]
MARKS: dict[str, Mark] = {}
# Headings of papers' sections that `modformer sweep` prints on the terminal with the report's own.
PRINTED: list[str] = []


def check_paper(named: str) -> None:
    """Refuse `sweep.paper: named` unless that paper is installed and loaded."""
    if named in BROKEN:
        raise ConfigError(f"sweep.paper: paper '{named}' did not load: {BROKEN[named]}")
    if named not in PAPERS:
        raise ConfigError(f"sweep.paper: no paper '{named}' is installed (known: {', '.join(sorted(PAPERS)) or 'none'}; "
                          f"a paper is a package with an entry point of the group modformer.papers: docs/plugins.md)")


def papers_of(named: str | None, configs: list[dict[str, Any] | None]) -> list[str]:
    """The papers a sweep belongs to: the one its sweep file names, then those whose
    construction its runs' configs use; a named paper that is not loaded is an error."""
    if named is not None:
        check_paper(named)
    found = [named] if named else []
    for config in configs:
        paper = construction_paper(config) if config else None
        if paper and paper not in found:
            found.append(paper)
    return found


def mark(papers: list[str], config: dict[str, Any] | None, axis: str) -> tuple[float, str] | None:
    """The first mark any of `papers` draws for a run with `config`."""
    for paper in papers:
        if paper in MARKS and config is not None:
            found = MARKS[paper](config, axis)
            if found is not None:
                return found
    return None
