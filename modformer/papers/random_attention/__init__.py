"""The random-attention paper (arXiv 2506.01115): its reference construction, the budgets of
its reference scripts, the report sections that state a run's fraction of them, the task and
report section of its Theorem 5.1 check (causal_regression, theorem51), and the reading of
trained retrieval circuits (`modformer random-attention-circuits`).

A plugin like any other: pyproject.toml's entry point `modformer.papers: random_attention`
names `register` (modformer/plugins.py).
"""

from ...commands import Command
from ...plugins import Paper
from ...registry import TASKS


def _circuits(p) -> None:
    from .circuits import circuits_arguments  # the command's module loads torch models: only when asked

    circuits_arguments(p)


def register(paper: Paper) -> None:
    """What the paper adds to the library (modformer/plugins.py)."""
    from .causal_regression import CausalRegression
    from .construction import REFERENCE
    from .migrations import migrate_older_configs, migrate_older_overrides
    from .report import HEADING, construction_section, reference_mark
    from .theorem51 import fit_error_section

    paper.construction("reference", REFERENCE, alias="reference")
    paper.migration(config=migrate_older_configs, command=migrate_older_overrides)
    paper.part(TASKS, "causal_regression", CausalRegression)
    paper.section(construction_section, printed=HEADING)
    paper.section(fit_error_section)
    paper.mark(reference_mark)
    paper.command(Command("random-attention-circuits", "how trained retrieval models answer: attention on the query, "
                                                       "head ablation, position knockout, activation patching",
                          _circuits))
