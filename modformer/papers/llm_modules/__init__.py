"""LLM Modules (arXiv 2502.08213): the experiment's command (`modformer llm-modules`) and
its report writer for `modformer report`."""

from . import command  # noqa: F401  (importing registers it)
