"""LLM Modules (arXiv 2502.08213): the experiment (its config, arms, data, runner, report),
its kind of sweep run (`sweep.experiment: llm_modules`) and its command (`modformer
llm-modules`, that sweep with the config's arms as variants).

A plugin like any other: pyproject.toml's entry point `modformer.papers: llm_modules` names
`register` (modformer/plugins.py).
"""

from ...plugins import Paper


def register(paper: Paper) -> None:
    """What the paper adds to the library (modformer/plugins.py)."""
    from . import command, migrations, sweep_kind

    paper.command(command.COMMAND)
    paper.migration(layout=migrations.one_folder_layout)
    paper.run_kind(sweep_kind.KIND)
