"""`modformer bench`: side-by-side benchmarks, printed as a table and written as Markdown and JSON."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from pathlib import Path

import torch

from ..errors import ModformerError
from ..files import atomic_write_text, output_folder
from ..registry import TASKS
from ..tasks.text import TextTask
from ..version import code_version, machine
from .bridged_inference import bridged_inference, random_teacher
from .bridged_inference import markdown as bridged_markdown
from .data import data_throughput, load_bench_config
from .data import markdown as data_markdown
from .knowledge import knowledge_cost, markdown
from .llama import llama_throughput
from .llama import markdown as llama_markdown
from .scaling import markdown as scaling_markdown
from .scaling import plot as scaling_plot
from .scaling import scaling
from .teacher_cache import markdown as teacher_cache_markdown
from .teacher_cache import teacher_cache_epochs


def _knowledge(args: argparse.Namespace) -> int:
    if args.width < 8 or args.width % 8 or args.repeats < 1 or args.layers < 1 or args.threads < 1:
        raise ModformerError("--width must be a multiple of 8 (at least 8); --repeats, --layers and --threads positive")
    torch.set_num_threads(args.threads)
    tokens = [tuple(int(v) for v in item.split("x")) for item in args.tokens]
    rows = knowledge_cost(d_model=args.width, tokens=tokens, n_layers=args.layers, repeats=args.repeats)
    text = markdown(rows, args.threads)
    print(text)
    _write(args.out, "knowledge_cost", "Knowledge layer against the FFN it folds into", text, rows)
    return 0


def _write(out_dir: str | None, name: str, title: str, text: str, rows: list) -> None:
    if not out_dir:
        return
    out = output_folder(out_dir)
    # What made the figures: times differ up to 2x between machines of one kind.
    made = {"code_version": code_version(), "machine": machine()}
    atomic_write_text(out / f"{name}.md", f"# {title}\n\nMade by modformer {made['code_version']} on "
                                          f"{made['machine']}.\n\n" + text)
    # The ratio is a property of the knowledge rows; written out so the JSON stands alone.
    data = [{**asdict(r), **({"ratio": r.ratio} if hasattr(r, "ratio") else {})} for r in rows]
    atomic_write_text(out / f"{name}.json", json.dumps({**made, "rows": data}, indent=1) + "\n")
    print(f"written: {out / (name + '.md')}, {out / (name + '.json')}")


def _llama(args: argparse.Namespace) -> int:
    if min(args.width, args.layers, args.heads, args.batch, args.seq, args.repeats, args.threads) < 1 \
            or args.width % args.heads or (args.width // args.heads) % 2:
        raise ModformerError("sizes must be positive, --heads must divide --width into even head widths")
    torch.set_num_threads(args.threads)
    rows = llama_throughput(d_model=args.width, n_layers=args.layers, n_heads=args.heads, batch=args.batch,
                            seq_len=args.seq, precisions=tuple(args.precision), variants=tuple(args.variants),
                            hf=not args.no_hf, checkpointing=args.checkpointing, compiled=args.compile,
                            construction=args.construction or ("reference" if args.reference else None),
                            repeats=args.repeats)
    text = llama_markdown(rows, args.threads)
    print(text)
    _write(args.out, "llama_throughput", "Training throughput against Hugging Face Llama", text, rows)
    return 0


def _scaling(args: argparse.Namespace) -> int:
    values = {"width": args.widths, "depth": args.depths, "seq": args.seqs}
    # `--depths` with nothing after it leaves that axis out: said, not silent
    for name in [{"width": "--widths", "depth": "--depths", "seq": "--seqs"}[k] for k, v in values.items() if v == []]:
        print(f"modformer: {name} given without values: that axis is left out", file=sys.stderr)
    values = {k: v for k, v in values.items() if v}
    if not values or any(x < 1 for v in values.values() for x in v) or args.threads < 1 or args.repeats < 1 \
            or any(w % args.heads or (w // args.heads) % 2 for w in values.get("width", [])):
        raise ModformerError("give positive --widths, --depths or --seqs (widths divisible by --heads into even "
                             "head widths), and positive --threads and --repeats")
    torch.set_num_threads(args.threads)
    base = {"d_model": args.width, "n_layers": args.layers, "n_heads": args.heads, "batch": args.batch,
            "seq_len": args.seq}
    points = scaling(values, base=base, precision=args.precision, checkpointing=args.checkpointing,
                     repeats=args.repeats)
    text = (f"torch {torch.__version__}, {args.threads} thread(s), CPU, {args.precision}; base shape: width "
            f"{args.width}, {args.layers} layers, {args.heads} heads, batch {args.batch} x {args.seq}; one axis "
            f"moves at a time.\n\n" + scaling_markdown(points))
    print(text)
    _write(args.out, "scaling", "Training throughput and peak memory as the model grows", text + "\n![scaling](scaling.png)\n",
           [row for _, _, row in points])
    if args.out:
        scaling_plot(points, Path(args.out) / "scaling.png")
    return 0


def _data(args: argparse.Namespace) -> int:
    if args.repeats < 1 or args.threads < 1:
        raise ModformerError("--repeats and --threads must be positive")
    torch.set_num_threads(args.threads)
    cfg = load_bench_config(args.config, args.overrides, args.variant)
    if not issubclass(TASKS[cfg.task.name], TextTask):
        raise ModformerError(f"bench data times a text task's loader (memory-mapped token shards); task "
                             f"'{cfg.task.name}' of {args.config} generates its batches: give a config of lm or "
                             f"sentiment (e.g. configs/tasks/lm_tiny.yaml)")
    rows = data_throughput(cfg, repeats=args.repeats)
    text = data_markdown(rows, args.threads)
    print(text)
    _write(args.out, "data_throughput", "Data loading against training", text, rows)
    return 0


def _teacher_cache(args: argparse.Namespace) -> int:
    if min(args.width, args.layers, args.heads, args.rows, args.seq, args.batch, args.epochs, args.threads) < 1 \
            or args.width % args.heads or (args.width // args.heads) % 2:
        raise ModformerError("sizes must be positive, --heads must divide --width into even head widths")
    torch.set_num_threads(args.threads)
    rows, facts = teacher_cache_epochs(d_model=args.width, n_layers=args.layers, n_heads=args.heads, rows=args.rows,
                                       seq_len=args.seq, batch=args.batch, epochs=args.epochs, dtype=args.dtype,
                                       hf=args.hf)
    text = teacher_cache_markdown(rows, facts, args.threads)
    print(text)
    _write(args.out, "teacher_cache", "Teacher forward passes and time per epoch, with and without the teacher-state "
                                      "cache", text, rows)
    return 0


def _bridged_inference(args: argparse.Namespace) -> int:
    if min(args.vocab, args.layers, args.heads, args.batch, args.prompt, args.repeats, args.threads, *args.new) < 1:
        raise ModformerError("sizes, lengths, --repeats and --threads must be positive")
    if args.place != "input" and not (args.place.startswith("block_") and args.place[6:].isdigit()
                                      and int(args.place[6:]) < args.layers):
        raise ModformerError(f"--place must be input or block_i with i < --layers ({args.layers}), got {args.place}")
    torch.set_num_threads(args.threads)
    if args.teacher == "random":
        teacher, name = random_teacher(), "a tiny random Llama"
    else:
        from ..interop.packaged import load_teacher
        teacher, name = load_teacher(args.teacher)[0], args.teacher
    width = args.width or teacher.config.hidden_size
    if width % args.heads or (width // args.heads) % 2 or width % args.bridge_heads:
        raise ModformerError(f"--heads must divide the student width {width} into even head widths, and "
                             f"--bridge-heads divide it")
    rows, facts = bridged_inference(teacher, vocab=args.vocab, width=args.width, layers=args.layers,
                                    heads=args.heads, d_ff=args.d_ff, place=args.place, bridge_heads=args.bridge_heads,
                                    batch=args.batch, prompt=args.prompt, new=tuple(args.new), repeats=args.repeats,
                                    precision=args.precision)
    text = bridged_markdown(rows, facts, args.threads, name)
    print(text)
    _write(args.out, "bridged_inference", "Inference cost of a student reading a frozen teacher through a bridge",
           text, rows)
    return 0


def _tokens(text: str) -> str:
    parts = text.split("x")
    if len(parts) != 2 or not all(p.isdigit() and int(p) > 0 for p in parts):
        raise argparse.ArgumentTypeError(f"expected BATCHxSEQ such as 16x256, got {text!r}")
    return text


def bench_arguments(p: argparse.ArgumentParser) -> None:
    """The suites of `modformer bench`, each with its arguments and handler."""
    suites = p.add_subparsers(dest="suite", metavar="SUITE", required=True)
    k = suites.add_parser(
        "knowledge", help="a knowledge layer (and model) against the FFN (and model) it folds into",
        description="Time a training step (forward and backward, E included) and an inference forward of a "
                    "knowledge layer and of fold(layer), interleaved, at each batch x sequence; the same for a "
                    "knowledge model against its folded standard model. Prints the medians and their ratio.")
    k.add_argument("--width", type=int, default=256, help="d_model, a multiple of 8; n_E = d_ff = 4 x width; heads of width 8 to 64 (default: 256)")
    k.add_argument("--layers", type=int, default=4, help="layers of the whole-model comparison (default: 4)")
    k.add_argument("--tokens", nargs="+", type=_tokens, default=["8x64", "16x256"], metavar="BATCHxSEQ",
                   help="shapes to time (default: 8x64 16x256)")
    k.add_argument("--repeats", type=int, default=15, help="timed repeats per contender (default: 15)")
    k.add_argument("--threads", type=int, default=torch.get_num_threads(),
                   help="CPU threads for torch (default: torch's)")
    k.add_argument("--out", help="folder for knowledge_cost.md and knowledge_cost.json")
    k.set_defaults(func=_knowledge)

    ll = suites.add_parser(
        "llama", help="training throughput of our models against Hugging Face LlamaForCausalLM, MFU and peak memory",
        description="Time training steps (forward, backward, fused AdamW) of our standard model, the same weights "
                    "in transformers' LlamaForCausalLM, and our Frozen-QK and MixiT variants, interleaved in one "
                    "process, per precision; print tokens/s, ratios and MFU against a matmul peak measured here, "
                    "and each contender's peak memory in one training step.")
    ll.add_argument("--width", type=int, default=256, help="d_model (default: 256)")
    ll.add_argument("--layers", type=int, default=4, help="blocks (default: 4)")
    ll.add_argument("--heads", type=int, default=4, help="attention heads (default: 4)")
    ll.add_argument("--batch", type=int, default=16, help="sequences per step (default: 16)")
    ll.add_argument("--seq", type=int, default=256, help="tokens per sequence (default: 256)")
    ll.add_argument("--precision", nargs="+", choices=["fp32", "bf16"], default=["fp32", "bf16"],
                    help="precisions to time (default: both)")
    ll.add_argument("--variants", nargs="*", default=["frozen_qk", "mixit"], help="our variants to add")
    ll.add_argument("--no-hf", action="store_true", help="leave out transformers' Llama")
    ll.add_argument("--checkpointing", action="store_true",
                    help="add our standard model with activation checkpointing (memory saved, time it costs)")
    ll.add_argument("--compile", action="store_true",
                    help="add our standard model under torch.compile (compiled in the untimed warm-up steps); "
                         "with --construction, each of its contenders compiled too")
    ll.add_argument("--construction", metavar="NAME",
                    help="add the standard model and each variant built in this construction (model.construction; "
                         "`modformer list` names them), labelled ', NAME'")
    ll.add_argument("--reference", action="store_true", help="the same as --construction reference (older name)")
    ll.add_argument("--repeats", type=int, default=5, help="timed steps per contender (default: 5)")
    ll.add_argument("--threads", type=int, default=torch.get_num_threads(), help="CPU threads (default: torch's)")
    ll.add_argument("--out", help="folder for llama_throughput.md and .json")
    ll.set_defaults(func=_llama)

    sc = suites.add_parser("scaling", help="training tokens/s and peak memory of every contender as width, depth "
                                           "and length grow",
                           description="Move one of width, depth and sequence length at a time away from a base shape "
                                       "and time the `llama` suite's contenders at each point, and measure their peak "
                                       "memory in a training step; table and plot.")
    sc.add_argument("--widths", nargs="*", type=int, default=[128, 256, 512], help="widths (default: 128 256 512; the option alone: no width axis)")
    sc.add_argument("--depths", nargs="*", type=int, default=[2, 4, 8], help="depths (default: 2 4 8; the option alone: no depth axis)")
    sc.add_argument("--seqs", nargs="*", type=int, default=[128, 256, 512], help="lengths (default: 128 256 512; the option alone: no length axis)")
    sc.add_argument("--width", type=int, default=256, help="base width (default: 256)")
    sc.add_argument("--layers", type=int, default=4, help="base depth (default: 4)")
    sc.add_argument("--heads", type=int, default=4, help="heads (default: 4)")
    sc.add_argument("--batch", type=int, default=8, help="sequences per step (default: 8)")
    sc.add_argument("--seq", type=int, default=256, help="base length (default: 256)")
    sc.add_argument("--precision", choices=["fp32", "bf16"], default="fp32", help="precision (default: fp32)")
    sc.add_argument("--checkpointing", action="store_true",
                    help="add our standard model with activation checkpointing")
    sc.add_argument("--repeats", type=int, default=3, help="timed steps per contender and point (default: 3)")
    sc.add_argument("--threads", type=int, default=torch.get_num_threads(), help="CPU threads (default: torch's)")
    sc.add_argument("--out", help="folder for scaling.md, scaling.json and scaling.png")
    sc.set_defaults(func=_scaling)

    da = suites.add_parser(
        "data", help="tokens/s the text loader delivers against tokens/s training consumes",
        description="Time the training stream of a config's task (reading memory-mapped shards into batches) and a "
                    "training step of its model, interleaved in one process; print both in tokens/s. CONFIG may be "
                    "a sweep file (the sweep section is ignored).")
    da.add_argument("config", help="a run or sweep config, e.g. configs/experiments/random_attention/lm.yaml")
    da.add_argument("overrides", nargs="*", metavar="key=value", help="dotted overrides, e.g. train.batch_size=32")
    da.add_argument("--variant", help="model.variant to time (default: the config's, standard for a sweep)")
    da.add_argument("--repeats", type=int, default=5, help="timed repeats per contender (default: 5)")
    da.add_argument("--threads", type=int, default=torch.get_num_threads(), help="CPU threads (default: torch's)")
    da.add_argument("--out", help="folder for data_throughput.md and .json")
    da.set_defaults(func=_data)

    tc = suites.add_parser(
        "teacher-cache", help="teacher forward passes and time per epoch, with and without the teacher-state cache",
        description="Read a tiny random teacher's last-layer states over random token rows for several epochs, "
                    "each epoch once running the teacher on every batch and once through the teacher-state cache "
                    "(built in epoch 1, read after); count teacher forward passes (a forward hook) and time each "
                    "epoch.")
    tc.add_argument("--width", type=int, default=256, help="teacher d_model (default: 256)")
    tc.add_argument("--layers", type=int, default=4, help="teacher blocks (default: 4)")
    tc.add_argument("--heads", type=int, default=4, help="teacher heads (default: 4)")
    tc.add_argument("--rows", type=int, default=256, help="token rows per epoch (default: 256)")
    tc.add_argument("--seq", type=int, default=128, help="longest row; lengths are drawn from seq/2 to seq (default: 128)")
    tc.add_argument("--batch", type=int, default=16, help="rows per teacher forward pass and per read (default: 16)")
    tc.add_argument("--epochs", type=int, default=3, help="epochs (default: 3)")
    tc.add_argument("--dtype", choices=["float32", "bf16"], default="float32", help="cache dtype (default: float32)")
    tc.add_argument("--hf", action="store_true", help="the teacher is transformers' LlamaForCausalLM (same weights)")
    tc.add_argument("--threads", type=int, default=torch.get_num_threads(), help="CPU threads (default: torch's)")
    tc.add_argument("--out", help="folder for teacher_cache.md and .json")
    tc.set_defaults(func=_teacher_cache)

    bi = suites.add_parser(
        "bridged-inference", help="generation speed and memory: a student alone, reading a frozen teacher through a "
                                  "bridge (teacher states kept or recomputed), and the teacher alone",
        description="Greedy generation, side by side in one process (interleaved, median of repeats): a modformer "
                    "student alone; the same student reading a frozen teacher's final states through an enhanced "
                    "cross-attention bridge, the teacher's key-value cache and states kept between steps or the "
                    "whole text re-read by the teacher at every step; and the teacher alone. Prints tokens/s, the "
                    "ratio to the student alone, teacher positions read, weights and peak tensor memory. Random "
                    "weights; the student's vocabulary is the teacher's first --vocab ids.")
    bi.add_argument("--teacher", default="smollm2-135m-instruct",
                    help="the packaged teacher (default), a local Hugging Face causal LM folder, or random (a tiny "
                         "random Llama)")
    bi.add_argument("--vocab", type=int, default=8192, help="student vocabulary, the teacher's first ids (default: 8192)")
    bi.add_argument("--width", type=int, default=None, help="student width (default: the teacher's)")
    bi.add_argument("--layers", type=int, default=2, help="student blocks (default: 2)")
    bi.add_argument("--heads", type=int, default=9, help="student heads (default: 9)")
    bi.add_argument("--d-ff", type=int, default=1152, help="student feed-forward width (default: 1152)")
    bi.add_argument("--place", default="block_1", help="where the bridge sits: input or block_i (default: block_1)")
    bi.add_argument("--bridge-heads", type=int, default=8, help="bridge attention heads (default: 8)")
    bi.add_argument("--batch", type=int, default=4, help="texts generated at once (default: 4)")
    bi.add_argument("--prompt", type=int, default=16, help="prompt tokens (default: 16)")
    bi.add_argument("--new", nargs="+", type=int, default=[8, 32], help="tokens generated per text, one table "
                                                                         "block each (default: 8 32)")
    bi.add_argument("--precision", choices=["fp32", "bf16"], default="fp32", help="autocast precision (default: fp32)")
    bi.add_argument("--repeats", type=int, default=3, help="timed generations per contender (default: 3)")
    bi.add_argument("--threads", type=int, default=torch.get_num_threads(), help="CPU threads (default: torch's)")
    bi.add_argument("--out", help="folder for bridged_inference.md and .json")
    bi.set_defaults(func=_bridged_inference)
    return p
