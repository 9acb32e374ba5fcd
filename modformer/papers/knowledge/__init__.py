"""The knowledge base (arXiv 2501.00823) on a pretrained model: its command
(`modformer knowledge-pretrained`), its report writer for `modformer report`, and the
compression ladder and the fact edits as kinds of sweep run (`sweep.experiment:
knowledge_ladder`, `knowledge_edits`)."""

from . import command, edits_kind, sweep_kind  # noqa: F401  (importing registers them)
