"""The commands that read a trained run and analyse it: `modformer attention` (every layer's
and head's attention map for one sequence), `modformer usage` (which knowledge entries
each layer reads) and `modformer signal --runs` (token similarity after every block of
trained runs, beside the same models at init). The analyses are in `modformer.analysis`;
this is their command line, above the loading of runs (`evaluate.load_run`)."""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import torch

from .commands import describe_parser
from .analysis.common import model_max_seq_len, random_tokens
from .analysis.induction import plot_attention_maps
from .analysis.knowledge_usage import entry_usage, markdown, write_usage
from .analysis.signal import signal_arguments
from .analysis.signal_trained import group_runs, markdown_table, plot_trained_signal, run_signal
from .errors import ModformerError
from .evaluate import beside, evaluate, load_run
from .files import atomic_write_text, output_folder
from .sweep.runner import read_results
from .variants import build_model
from .variants.base import run_label
from .version import code_version, machine


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


def _signal_runs(source: Path) -> list[dict[str, Any]]:
    """The runs `signal --runs SOURCE` reads: every finished run of a sweep folder, or the
    run folder itself; each with its id, folder, variant, grid point and seed."""
    if (source / "results.jsonl").is_file():
        done = [r for r in read_results(source).values() if r.get("status") == "done"]
        if not done:
            raise ModformerError(f"signal --runs: the sweep {source} has no finished run")
        return [{"run_id": r["run_id"], "dir": source / r.get("run_dir", f"runs/{r['run_id']}"),
                 "variant": r["variant"], "point": r.get("point") or {}, "seed": r["seed"]} for r in done]
    if (source / "checkpoints").is_dir():
        return [{"run_id": source.name, "dir": source, "variant": None, "point": {}, "seed": None}]
    raise ModformerError(f"signal --runs: {source} is neither a sweep folder (results.jsonl) nor a run folder "
                         "(checkpoints/)")


def trained_signal(source: str | Path, out: str | Path | None = None, *, examples: int = 256,
                   echo=print) -> dict[str, Path]:
    """Token similarity of every trained run under `source` (a sweep or one run folder),
    after the embedding and every block, beside the same model at init on the same inputs
    (`modformer.analysis.signal_trained`): `token_similarity.json` in each run folder, and
    `trained_signal.json`, `.md` and `.png` under `out` (default: `source`).

    Args:
        source: a sweep folder (its finished runs) or a run folder, each run with checkpoints.
        out: where the sweep's table, figure and JSON go; None: `source`.
        examples: how many of each run's test examples (the first) both models read.
        echo: called with one line per run measured.

    Returns:
        The paths written under `out`, under the keys `json`, `markdown` and `plot`.
    """
    if examples < 1:
        raise ModformerError(f"signal: --examples must be positive, got {examples}")
    source = Path(source)
    runs = _signal_runs(source)
    for run in runs:  # refuse before any work: committed sweeps keep no checkpoints
        if not (run["dir"] / "checkpoints").is_dir():
            raise ModformerError(f"signal --runs: run {run['run_id']} has no checkpoints/ folder (checkpoints are "
                                 "not committed: train the run again)")
    version, where, start, rows = code_version(), machine(), time.perf_counter(), []
    for run in runs:
        model, cfg, task, step = load_run(run["dir"])
        if cfg.train.init_from is not None:
            raise ModformerError(f"signal --runs: run {run['run_id']} started from train.init_from="
                                 f"{cfg.train.init_from}, not from its own initialisation")
        initial = build_model(cfg.model, cfg.train.seed)  # what the trainer built before its first step
        batch = task.test_set().narrow(0, examples)
        record = {"run_id": run["run_id"], "step": step, "code_version": version, "machine": where,
                  "inputs": f"the first {len(batch)} examples of the test set of task {cfg.task.name}, each counted "
                            "up to its last scored position",
                  "test_accuracy": evaluate(model, task).get("accuracy"), **run_signal(model, initial, batch)}
        atomic_write_text(run["dir"] / "token_similarity.json", json.dumps(record, indent=1) + "\n")
        setting = " ".join(f"{k}={v}" for k, v in sorted(run["point"].items())
                           if k not in ("model.n_layers", "model.construction"))
        rows.append({"run_id": run["run_id"], "variant": run["variant"] or cfg.model.variant,
                     "construction": cfg.model.construction, "depth": cfg.model.n_layers, "setting": setting,
                     "seed": cfg.train.seed if run["seed"] is None else run["seed"],
                     "accuracy": record["test_accuracy"], "record": record})
        accuracy = "n/a" if record["test_accuracy"] is None else f"{record['test_accuracy']:.3f}"
        echo(f"{run['run_id']}: step {step}, accuracy {accuracy}, cosine "
             f"{record['trained']['cosine']:.3g} trained, {record['init']['cosine']:.3g} at init")
    groups = group_runs(rows)
    target = output_folder(source if out is None else out)
    paths = {"json": target / "trained_signal.json", "markdown": target / "trained_signal.md",
             "plot": target / "trained_signal.png"}
    settings = {"runs": str(source), "examples": examples, "threads": torch.get_num_threads(),
                "code_version": version, "machine": where, "seconds": round(time.perf_counter() - start, 2)}
    atomic_write_text(paths["json"], json.dumps({"settings": settings, "groups": groups}, indent=1) + "\n")
    atomic_write_text(paths["markdown"], "# Token similarity, trained and at initialisation\n\n"
                      f"Made by modformer {version} on {where}: each run's latest checkpoint and the same model at "
                      f"init, on the first {len(batch)} examples of its task's test set (each counted up to its last "
                      "scored position); after the last block, mean ± sample std over seeds. Each run's "
                      "token_similarity.json has every block's figures (modformer/analysis/signal_trained.py).\n\n"
                      + markdown_table(groups))
    plot_trained_signal(groups, paths["plot"])
    return paths


def _signal_runs_command(args: argparse.Namespace) -> int:
    """`modformer signal --runs DIR`, its threads already set (`analysis.signal`)."""
    paths = trained_signal(args.runs, args.out, examples=args.examples)
    print(paths["markdown"].read_text())
    print(f"wrote {', '.join(str(p) for p in paths.values())}")
    return 0


def signal_command_arguments(p: argparse.ArgumentParser) -> None:
    """The arguments and handler of `modformer signal`: at init (`modformer.analysis.signal`),
    and of trained runs with `--runs`."""
    signal_arguments(p, trained=_signal_runs_command)
