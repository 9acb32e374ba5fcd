"""A feed-forward module that reads the token ids: the block's FFN plus a learned vector per
token (as nanochat's value embeddings add one), zero at padding.

It reads what the model was given through `ModelInputs` (modformer/model/inputs.py): its
forward takes the keyword `inputs`, and the block hands it the token ids, the padding mask
and the rest, at training, evaluation and cached generation alike.

    model:
      ffn: examples.parts.token_memory:TokenMemoryFFN
"""

import torch
from torch import nn

from modformer.model.inputs import ModelInputs


class TokenMemoryFFN(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.up = nn.Linear(cfg.d_model, cfg.ffn_dim, bias=False)
        self.down = nn.Linear(cfg.ffn_dim, cfg.d_model, bias=False)
        self.memory = nn.Embedding(cfg.vocab_size, cfg.d_model)  # redrawn N(0, init_std) by the model's init

    def forward(self, x: torch.Tensor, *, inputs: ModelInputs) -> torch.Tensor:
        """x: (B, T, d_model) -> (B, T, d_model), plus memory[token] at each real token."""
        memory = self.memory(inputs.tokens)  # (B, T, d_model)
        if inputs.padding_mask is not None:
            memory = memory * inputs.padding_mask.unsqueeze(-1)
        return self.down(nn.functional.gelu(self.up(x))) + memory
