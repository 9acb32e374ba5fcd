"""The knowledge base (arXiv 2501.00823) on a pretrained model: its command
(`modformer knowledge-pretrained`), its report writer for `modformer report`, and the
compression ladder and the fact edits as kinds of sweep run (`sweep.experiment:
knowledge_ladder`, `knowledge_edits`).

A plugin like any other: pyproject.toml's entry point `modformer.papers: knowledge` names
`register` (modformer/plugins.py).
"""

from ...commands import register_report
from ...plugins import Paper


def register(paper: Paper) -> None:
    """What the paper adds to the library (modformer/plugins.py)."""
    from . import command, edits_kind, sweep_kind

    paper.command(command.COMMAND)
    register_report(command.REPORT)
    paper.run_kind(sweep_kind.KIND)
    paper.run_kind(edits_kind.KIND)
