"""Greedy generation from a modformer model, with a key-value cache or without.

With the cache, the prompt is processed once and every new token costs one position's
work; without it, every step re-reads the whole sequence. Both give the same tokens (and
logits equal up to rounding): the cache is only a way of not repeating work.
"""

from __future__ import annotations

import torch

from .analysis.common import evaluating
from .model.transformer import Transformer


def greedy_generate(model: Transformer, prompt: torch.Tensor, max_new_tokens: int, *,
                    use_cache: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """prompt (B, T) -> (tokens (B, T + max_new_tokens), logits of each new token (B, max_new_tokens, vocab))."""
    if max_new_tokens < 0:
        raise ValueError(f"max_new_tokens must not be negative, got {max_new_tokens}")
    if prompt.ndim != 2 or prompt.shape[1] == 0:
        raise ValueError(f"prompt must be (batch, tokens) with at least one token, got shape {tuple(prompt.shape)}")
    limit = model.max_seq_len
    fed = prompt.shape[1] + max(max_new_tokens - 1, 0)  # the last new token is never fed back
    if limit is not None and fed > limit:
        raise ValueError(f"{prompt.shape[1]} prompt tokens + {max_new_tokens} new ones need {fed} positions, "
                         f"more than model.max_seq_len={limit}")
    tokens, steps = prompt, []
    cache = model.new_cache() if use_cache else None
    with evaluating(model):
        feed = prompt
        for _ in range(max_new_tokens):
            logits = model(feed, cache)[:, -1] if use_cache else model(tokens)[:, -1]
            steps.append(logits)
            nxt = logits.argmax(-1, keepdim=True)
            tokens = torch.cat([tokens, nxt], dim=1)
            feed = nxt
    empty = torch.zeros(prompt.shape[0], 0, model.vocab_size, dtype=model.embed.weight.dtype, device=prompt.device)
    return tokens, torch.stack(steps, dim=1) if steps else empty
