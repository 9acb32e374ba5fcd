"""LLM Modules (arXiv 2502.08213): the experiment (its config, arms, data, runner, report),
its command (`modformer llm-modules`), its report writer for `modformer report`, and its kind
of sweep run (`sweep.experiment: llm_modules`).

A plugin like any other: pyproject.toml's entry point `modformer.papers: llm_modules` names
`register` (modformer/plugins.py).
"""

from ...commands import register_report
from ...plugins import Paper


def register(paper: Paper) -> None:
    """What the paper adds to the library (modformer/plugins.py)."""
    from . import command, sweep_kind

    for c in command.COMMANDS:
        paper.command(c)
    register_report(command.REPORT)
    paper.run_kind(sweep_kind.KIND)
