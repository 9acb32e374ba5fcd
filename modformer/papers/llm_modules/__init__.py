"""LLM Modules (arXiv 2502.08213): the experiment (its config, arms, data, runner, report),
its command (`modformer llm-modules`), its report writer for `modformer report`, and its kind
of sweep run (`sweep.experiment: llm_modules`)."""

from . import command, sweep_kind  # noqa: F401  (importing registers them)
