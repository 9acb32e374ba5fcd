"""The smallest paper plugin: one of each thing a paper can add to modformer (docs/plugins.md).

- a construction, `minimal_paper.tiny`: a one-layer width-16 model unless the config says otherwise;
- a report section, in the report of every sweep built with that construction (or naming
  `sweep.paper: minimal_paper`), and a mark on its budget curves;
- a kind of sweep run, `sweep.experiment: minimal_count` (each run counts to its config's `n`);
- a command, `modformer minimal-paper-summary SWEEP_DIR`.
"""

from __future__ import annotations

from modformer.commands import Command
from modformer.constructions import Construction
from modformer.plugins import Paper

from .count import KIND, run_arguments
from .summary import BUDGET, mark, section, summary_arguments


def _fill_tiny(data: dict) -> None:
    """Only what the config leaves unset (an explicit key always wins)."""
    model = data.setdefault("model", {})
    for key, value in (("d_model", 16), ("n_layers", 1), ("n_heads", 2)):
        model.setdefault(key, value)


TINY = Construction("a one-layer width-16 model, the minimal paper's", _fill_tiny, lambda config: "tiny")


def register(paper: Paper) -> None:
    """Called once by `import modformer`, with this paper's handle (named minimal_paper)."""
    paper.construction("tiny", TINY)
    paper.section(section, printed="## Minimal paper")
    paper.mark(mark)
    paper.run_kind(KIND)
    paper.command(Command("minimal-paper-summary", "the minimal paper: how many runs of a sweep are finished",
                          summary_arguments))
    paper.command(Command("minimal-paper-run", "", run_arguments))  # one run of minimal_count (unlisted)


__all__ = ["register", "BUDGET"]
