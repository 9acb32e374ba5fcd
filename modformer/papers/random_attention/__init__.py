"""The random-attention paper (arXiv 2506.01115): its reference construction, the budgets of
its reference scripts, and the report sections that state a run's fraction of them."""

from . import construction, report  # noqa: F401  (importing registers them)
