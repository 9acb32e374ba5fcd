"""The knowledge base (arXiv 2501.00823) on a pretrained model: its command
(`modformer knowledge-pretrained`), its report writer for `modformer report`, and the
compression ladder as a kind of sweep run (`sweep.experiment: knowledge_ladder`)."""

from . import command, sweep_kind  # noqa: F401  (importing registers them)
