"""The knowledge base (arXiv 2501.00823) beyond the model parts: folding knowledge layers into
FFNs and unfolding FFNs (ours or Hugging Face Llama's) into knowledge layers over one base."""

from .fold import (fold, fold_model, folded_config, unfold, unfold_approximate, unfold_model, unfold_model_approximate,
                   unfolded_config)

__all__ = ["fold", "fold_model", "folded_config", "unfold", "unfold_approximate", "unfold_model",
           "unfold_model_approximate", "unfolded_config"]
