"""The knowledge base (arXiv 2501.00823) on a pretrained model: the compression ladder, the
fact edits and the repair as kinds of sweep run (`sweep.experiment: knowledge_ladder`,
`knowledge_edits`, `knowledge_repair`), and the command that carries out one run of them
(`modformer knowledge-pretrained`).

A plugin like any other: pyproject.toml's entry point `modformer.papers: knowledge` names
`register` (modformer/plugins.py).
"""

from ...plugins import Paper


def register(paper: Paper) -> None:
    """What the paper adds to the library (modformer/plugins.py)."""
    from . import command, edits_kind, migrations, repair_kind, sweep_kind

    paper.command(command.COMMAND)
    paper.run_kind(sweep_kind.KIND)
    paper.run_kind(edits_kind.KIND)
    paper.run_kind(repair_kind.KIND)
    paper.migration(layout=migrations.edits_folder_layout)
