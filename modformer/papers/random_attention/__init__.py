"""The random-attention paper (arXiv 2506.01115): its reference construction, the budgets of
its reference scripts, the report sections that state a run's fraction of them, the task and
report section of its Theorem 5.1 check (causal_regression, theorem51), and the reading of
trained retrieval circuits (`modformer random-attention-circuits`)."""

from ...commands import Command, register
from . import causal_regression, construction, report, theorem51  # noqa: F401  (importing registers them)


def _circuits(p) -> None:
    from .circuits import circuits_arguments  # the command's module loads torch models: only when asked

    circuits_arguments(p)


register(Command("random-attention-circuits", "how trained retrieval models answer: attention on the query, head "
                                              "ablation, position knockout, activation patching", _circuits))
