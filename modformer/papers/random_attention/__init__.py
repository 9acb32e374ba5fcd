"""The random-attention paper (arXiv 2506.01115): its reference construction, the budgets of
its reference scripts, the report sections that state a run's fraction of them, and the
task and report section of its Theorem 5.1 check (causal_regression, theorem51)."""

from . import causal_regression, construction, report, theorem51  # noqa: F401  (importing registers them)
