"""The commands that read a trained run and analyse it: `modformer attention` (every layer's
and head's attention map for one sequence) and `modformer usage` (which knowledge entries
each layer reads). The analyses are in `modformer.analysis`; this is their command line,
above the loading of runs (`evaluate.load_run`)."""

from __future__ import annotations

import argparse
from pathlib import Path

import torch

from .commands import describe_parser
from .analysis.common import model_max_seq_len, random_tokens
from .analysis.induction import plot_attention_maps
from .analysis.knowledge_usage import entry_usage, markdown, write_usage
from .errors import ModformerError
from .evaluate import beside, load_run
from .variants.base import run_label


def _attention_command(args: argparse.Namespace) -> int:
    if args.repeated is not None and args.repeated < 1:
        raise ModformerError(f"--repeated must be positive, got {args.repeated}")
    model, cfg, task, step = load_run(args.source)
    if args.repeated:  # the induction probe: random tokens, then the same tokens again
        half, limit = args.repeated, model_max_seq_len(model)
        if limit is not None and 2 * half > limit:
            raise ModformerError(f"--repeated {half} needs {2 * half} positions, more than the model's {limit}: "
                                 f"give --repeated {limit // 2} or less")
        first = random_tokens(1, half, cfg.model.vocab_size, torch.Generator().manual_seed(0))[0]
        tokens, what = torch.cat([first, first]), f"{half} random tokens repeated"
    else:
        inputs = task.validation_set().inputs
        if not 0 <= args.example < len(inputs):
            raise ModformerError(f"--example must be in 0..{len(inputs) - 1}, got {args.example}")
        tokens, what = inputs[args.example], f"validation example {args.example}"
    out = Path(args.out) if args.out else beside(args.source, "attention.png")
    path = plot_attention_maps(model, tokens, out,
                               title=f"{run_label(cfg.model)} on {cfg.task.name}, step {step}: "
                                     f"{what}")
    print(f"attention maps: {path}")
    return 0


def attention_arguments(p: argparse.ArgumentParser) -> None:
    """The arguments and handler of `modformer attention`."""
    describe_parser(p, "Plot a grid (rows: layers, columns: heads) of a trained model's attention patterns (or MixiT's "
                    "mixing matrices) on one validation example of its task, or on random tokens repeated twice "
                    "(the induction-head probe).")
    p.add_argument("source", help="a run directory (its latest checkpoint) or a checkpoint file")
    p.add_argument("--example", type=int, default=0, help="index of the validation example (default: 0)")
    p.add_argument("--repeated", type=int, metavar="N",
                   help="instead, N random tokens followed by the same N tokens")
    p.add_argument("--out", help="PNG to write (default: SOURCE/attention.png)")
    p.set_defaults(func=_attention_command)


def _usage_command(args: argparse.Namespace) -> int:
    if args.examples < 1 or args.top < 1:
        raise ModformerError("--examples and --top must be positive")
    model, _, task, _ = load_run(args.source)
    if (args.text is None) != (args.tokenizer is None):
        raise ModformerError("--text and --tokenizer go together (the text's tokens are read with that tokenizer)")
    inputs = task.validation_set().inputs if args.text is None else _text_blocks(args.text, args.tokenizer,
                                                                                  args.block_len)
    usage = entry_usage(model, inputs[:args.examples], top_k=args.top)
    out = Path(args.out) if args.out else beside(args.source, "usage")
    path = write_usage(usage, out, source=args.source)
    print(markdown(usage) + f"\nwritten: {path}, {out / 'usage.png'}, {out / 'usage.json'}")
    return 0


def _text_blocks(text: str, tokenizer: str, block_len: int) -> torch.Tensor:
    """(N, block_len) token ids of a text file read with a Hugging Face tokenizer (a converted
    pretrained model's own, e.g. its source folder), cut into consecutive blocks."""
    if block_len < 1:
        raise ModformerError(f"--block-len must be positive, got {block_len}")
    try:
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(tokenizer)
        ids = tok(Path(text).read_text(), add_special_tokens=False).input_ids
    except (OSError, ValueError, UnicodeDecodeError) as e:
        raise ModformerError(f"cannot read --text {text} with --tokenizer {tokenizer}: {str(e).splitlines()[0]}") \
            from None
    n = len(ids) // block_len
    if n == 0:
        raise ModformerError(f"--text {text} holds {len(ids)} tokens, fewer than one block of {block_len}")
    return torch.tensor(ids[:n * block_len]).view(n, block_len)


def usage_arguments(p: argparse.ArgumentParser) -> None:
    """The arguments and handler of `modformer usage`."""
    describe_parser(p, "Run a knowledge-variant checkpoint on its task's validation inputs and report, per layer, the "
                    "fraction of entries active per token, the entries carrying most of the score mass, the overlap "
                    "of the layers' top entries, and the entries most used per token (usage.md, usage.json, usage.png).")
    p.add_argument("source", help="a run directory (its latest checkpoint) or a checkpoint file")
    p.add_argument("--out", help="output directory (default: SOURCE/usage, or beside a checkpoint file)")
    p.add_argument("--examples", type=int, default=512, help="validation sequences to read (default: 512)")
    p.add_argument("--top", type=int, default=5, help="top entries reported per layer and token (default: 5)")
    p.add_argument("--text", help="read this text file instead of the task's inputs (a converted pretrained model "
                                  "has no task of its own); needs --tokenizer")
    p.add_argument("--tokenizer", help="a Hugging Face tokenizer folder for --text (e.g. the converted model's source)")
    p.add_argument("--block-len", type=int, default=128, help="tokens per sequence read from --text (default: 128)")
    p.set_defaults(func=_usage_command)
