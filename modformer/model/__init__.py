"""Model parts; importing this package registers the mixers and feed-forward modules."""

from . import attention, feedforward, mixing  # noqa: F401
from .block import Block
from .config import ModelConfig
from .transformer import Transformer

__all__ = ["Block", "ModelConfig", "Transformer"]
