"""The knowledge base (arXiv 2501.00823) on a pretrained model: its command
(`modformer knowledge-pretrained`) and its report writer for `modformer report`."""

from . import command  # noqa: F401  (importing registers it)
