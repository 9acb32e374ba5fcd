"""Analysis tools: induction-head scores, attention-map plots and signal propagation, at init
and of trained models beside their initialisation.

Everything reads model internals through `capture` hook points, so it works for any mixer
that exposes them (softmax attention, MixiT's fixed mixing).
"""

from .induction import attention_patterns, induction_scores, plot_attention_maps, plot_induction_scores
from .knowledge_usage import entry_usage
from .signal import signal_arguments, markdown_tables, signal_propagation, token_similarity, write_reports
from .signal_trained import layer_similarity, run_signal, scored_prefix

__all__ = [
    "signal_arguments", "attention_patterns", "entry_usage", "induction_scores", "markdown_tables", "plot_attention_maps",
    "plot_induction_scores", "signal_propagation", "token_similarity", "write_reports", "layer_similarity",
    "run_signal", "scored_prefix",
]
