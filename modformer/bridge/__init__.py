"""LLM Modules (arXiv 2502.08213): a frozen teacher feeds a student through enhanced
cross-attention. `EnhancedCrossAttention` is the bridge; `alignment` maps teacher tokens to
student positions (character offsets when the tokenizers differ), which is what keeps the
bridge causal."""

from .alignment import causal_visibility, leaky_visibility, offset_visibility
from .cache import TeacherStateCache
from .cross_attention import EnhancedCrossAttention
from .student import BridgedStudent
from .teacher import Teacher

__all__ = ["BridgedStudent", "EnhancedCrossAttention", "Teacher", "TeacherStateCache", "causal_visibility", "leaky_visibility",
           "offset_visibility"]
