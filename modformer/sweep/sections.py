"""What a paper's experiments add to the reports and curves of their sweeps.

The library's reports say nothing of any paper. A paper (modformer/papers/<paper>) registers
here, under its name, the report sections its experiments need (e.g. each run's budget as a
fraction of what the paper's reference scripts train) and a mark for budget curves (that
budget, drawn as a line). A sweep is one of a paper's experiments when its runs are built
with a construction that serves the paper (`Construction.paper`) or its sweep file names
the paper (`sweep.paper`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from ..constructions import construction_paper
from ..errors import ModformerError

# paper -> its sections: fn(sweep_dir, variants, groups, chosen) -> Markdown lines ([] for none).
Section = Callable[[Path, list[str], dict, dict], list[str]]
SECTIONS: dict[str, list[Section]] = {}
# paper -> fn(config, axis) -> (x, label) of the line a curve of that config's runs marks, or None;
# axis is "amount" (what a run trained on, in its task's unit) or "width".
Mark = Callable[[dict[str, Any], str], "tuple[float, str] | None"]
MARKS: dict[str, Mark] = {}
# Headings of papers' sections that `modformer sweep` prints on the terminal with the report's own.
PRINTED: list[str] = []


def papers_of(named: str | None, configs: list[dict[str, Any] | None]) -> list[str]:
    """The papers a sweep belongs to: the one its sweep file names, then those whose
    construction its runs' configs use; a named paper that registered nothing is an error."""
    if named is not None and named not in SECTIONS and named not in MARKS:
        raise ModformerError(f"sweep.paper: no paper '{named}' is registered (known: "
                             f"{', '.join(sorted(set(SECTIONS) | set(MARKS))) or 'none'})")
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
