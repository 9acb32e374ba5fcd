"""The random-attention paper (arXiv 2506.01115): its reference construction, the budgets of
its reference scripts, the report sections that state a run's fraction of them, and the
task of its Theorem 5.1 check (causal_regression)."""

from . import causal_regression, construction, report  # noqa: F401  (importing registers them)
