"""Generation from a modformer model, greedy or sampled, with a key-value cache or without;
and `modformer generate`, which continues a text prompt with a trained language model.

With the cache, the prompt is processed once and every new token costs one position's
work; without it, every step re-reads the whole sequence. Both give the same tokens (and
logits equal up to rounding): the cache is only a way of not repeating work. A model whose
mixer takes no cache (a part from outside this library, `Transformer.supports_cache`) is
generated from without one.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Callable

import torch

from .commands import describe_parser
from .analysis.common import evaluating, model_device
from .data.tokenizer import TextTokenizer
from .errors import ModformerError
from .model.transformer import Transformer


def greedy_generate(model: Transformer, prompt: torch.Tensor, max_new_tokens: int, *,
                    use_cache: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """prompt (B, T) -> (tokens (B, T + max_new_tokens), logits of each new token (B, max_new_tokens, vocab))."""
    return _generate(model, prompt, max_new_tokens, lambda logits: logits.argmax(-1, keepdim=True), use_cache)


def sample_generate(model: Transformer, prompt: torch.Tensor, max_new_tokens: int, *, temperature: float = 1.0,
                    top_k: int | None = None, generator: torch.Generator | None = None,
                    use_cache: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """Like `greedy_generate`, but each new token is drawn from softmax(logits / temperature)
    over the `top_k` most likely tokens (all if None), with `generator` (seeded: repeatable)."""
    if temperature <= 0:
        raise ValueError(f"temperature must be positive (greedy_generate is the limit at 0), got {temperature}")
    if top_k is not None and top_k < 1:
        raise ValueError(f"top_k must be positive or None, got {top_k}")

    def pick(logits: torch.Tensor) -> torch.Tensor:
        scaled = logits.double() / temperature  # (B, V)
        if top_k is not None and top_k < scaled.shape[-1]:
            kth = scaled.topk(top_k, dim=-1).values[:, -1:]
            scaled = scaled.masked_fill(scaled < kth, float("-inf"))
        return torch.multinomial(scaled.softmax(-1), 1, generator=generator)

    return _generate(model, prompt, max_new_tokens, pick, use_cache)


def _generate(model: Transformer, prompt: torch.Tensor, max_new_tokens: int,
              pick: Callable[[torch.Tensor], torch.Tensor], use_cache: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """The decoding loop; `pick` maps the last position's logits (B, V) to next tokens (B, 1)."""
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
    use_cache = use_cache and model.supports_cache()  # a mixer without a cache: the same tokens, more work
    cache = model.new_cache() if use_cache else None
    with evaluating(model):
        feed = prompt
        for _ in range(max_new_tokens):
            logits = model(feed, cache)[:, -1] if use_cache else model(tokens)[:, -1]
            steps.append(logits)
            nxt = pick(logits)
            tokens = torch.cat([tokens, nxt], dim=1)
            feed = nxt
    empty = torch.zeros(prompt.shape[0], 0, model.vocab_size, dtype=model.embed.weight.dtype, device=prompt.device)
    return tokens, torch.stack(steps, dim=1) if steps else empty


def generate_text(source: str | Path, prompt: str, max_new_tokens: int = 100, *, temperature: float = 0.0,
                  top_k: int | None = None, seed: int = 0, stop_at_end: bool = True) -> tuple[str, list[str]]:
    """(the prompt's continuation, notes) from a text run (a run directory or a checkpoint)
    and the run's tokenizer: greedy with temperature 0, else sampled with `seed`. The
    continuation ends at the first end-of-text unless `stop_at_end` is false; it is cut to
    the positions the model has (a note says so)."""
    from .evaluate import load_run
    from .tasks.text import TextTask

    model, cfg, task, _ = load_run(source)
    if not isinstance(task, TextTask):
        raise ModformerError(f"{source} is a run of task '{cfg.task.name}', not of a text task (lm): it has no "
                             f"tokenizer to turn text into tokens")
    path = Path(source)
    run_dir = path if path.is_dir() else path.parent.parent  # RUN/checkpoints/step_N.safetensors
    saved = run_dir / "tokenizer"
    tokenizer = TextTokenizer.load(saved) if (saved / "special.json").is_file() else task.tokenizer
    ids = tokenizer.encode(prompt)
    # An empty prompt starts a new document: generation from the end-of-text token, said so.
    notes = [] if ids else ["the prompt is empty: generating from the start of a document (after end-of-text)"]
    ids = ids or [tokenizer.eos_id]
    room = model.max_seq_len - len(ids) + 1
    if room < 1:
        raise ModformerError(f"the prompt has {len(ids)} tokens, more than the model's {model.max_seq_len} positions")
    if max_new_tokens > room:
        notes.append(f"generating {room} tokens, all that fit in the model's {model.max_seq_len} positions")
        max_new_tokens = room
    tensor = torch.tensor([ids], dtype=torch.long, device=model_device(model))
    try:
        if temperature == 0:
            tokens, _ = greedy_generate(model, tensor, max_new_tokens)
        else:
            generator = torch.Generator(tensor.device).manual_seed(seed)
            tokens, _ = sample_generate(model, tensor, max_new_tokens, temperature=temperature, top_k=top_k,
                                        generator=generator)
    except ValueError as e:  # a bidirectional model cannot extend a cache, for one
        raise ModformerError(f"cannot generate from {source}: {e}") from None
    new = tokens[0, len(ids):].tolist()
    if stop_at_end and tokenizer.eos_id in new:
        new = new[:new.index(tokenizer.eos_id)]
        if not new:
            notes.append("the model ended the text at once (its first new token is end-of-text; --keep-going "
                         "generates past it)")
    return tokenizer.decode(new), notes


def _generate_command(args: argparse.Namespace) -> int:
    if args.tokens < 0 or args.temperature < 0 or (args.top_k is not None and args.top_k < 1):
        raise ModformerError("--tokens and --temperature must not be negative, --top-k must be positive")
    text, notes = generate_text(args.source, args.prompt, args.tokens, temperature=args.temperature,
                                top_k=args.top_k, seed=args.seed, stop_at_end=not args.keep_going)
    for note in notes:
        print(f"modformer: {note}", file=sys.stderr)
    print(args.prompt + text)
    return 0


def generate_arguments(p: argparse.ArgumentParser) -> None:
    """The arguments and handler of `modformer generate`."""
    describe_parser(p, "Continue --prompt with a model trained on a text task (lm), using the run's tokenizer: greedy "
                    "by default, sampled with --temperature (and --top-k, --seed). Prints the prompt and its "
                    "continuation, which stops at the first end-of-text.")
    p.add_argument("source", help="a run directory (its latest checkpoint) or a checkpoint file")
    p.add_argument("--prompt", required=True, help="the text to continue (empty: from the start of a document)")
    p.add_argument("--tokens", type=int, default=100, help="most new tokens (default: 100)")
    p.add_argument("--temperature", type=float, default=0.0, help="0: greedy (default); above 0: sample")
    p.add_argument("--top-k", type=int, help="sample among the k most likely tokens only")
    p.add_argument("--seed", type=int, default=0, help="seed of the sampling (default: 0)")
    p.add_argument("--keep-going", action="store_true", help="do not stop at end-of-text")
    p.set_defaults(func=_generate_command)
