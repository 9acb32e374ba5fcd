"""The `modformer` command line. Help texts are generated from the config dataclasses."""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time
from typing import Any
from pathlib import Path

from . import api
from . import variants as _variants  # noqa: F401  (registers the variants)
from .analysis_commands import attention_arguments, signal_command_arguments, usage_arguments
from .bench import bench_arguments
from .interop.packaged import NAME as PACKAGED_TEACHER
from .interop.packaged import packaged_teacher_folder
from .config import RunConfig, load_config
from .commands import COMMANDS, Command, describe_parser
from .configtools import check_option_types, describe, field_help, get_dotted, key_lines
from .constructions import CONSTRUCTIONS
from .data import named_sources
from .errors import ConfigError, Interrupted, ModformerError, storage_fault
from .generate import generate_arguments
from .migrate import migrate_arguments
from .plugins import describe_papers
from .knowledge.convert import convert
from .registry import FFNS, MIXERS, TASKS, VARIANTS
from .version import source_version
from .sweep.curve import write_curve
from .sweep.quote import quote_arguments
from .sweep.report import summary_sections, write_report
from .sweep.kinds import RUN_KINDS
from .sweep.slurm_config import LAUNCHERS, SlurmConfig
from .sweep.spec import SweepConfig
from .sweep.status import format_status

# `modformer sweep` options that set keys of sweep.slurm, with their types.
SLURM_OPTIONS = {"partition": str, "time": str, "gpus_per_run": int, "cpus_per_run": int, "mem": str,
                 "array_parallelism": int, "account": str, "qos": str}


def _config_help() -> str:
    rows = describe(RunConfig, "")
    width = max(len(r[0]) for r in rows)
    lines = ["config keys (set in the YAML file or as key=value overrides):", *key_lines(rows, width), ""]
    for name in TASKS:
        task_rows = [r for r in describe(TASKS[name].Config, "task") if r[0] not in {x[0] for x in rows}]
        if task_rows:
            lines += [f"task '{name}' adds:", *key_lines(task_rows, width)]
    return "\n".join(lines)


def _sweep_help() -> str:
    rows = describe(SweepConfig, "sweep")
    kinds = [f"  {k.name:<20}variant {k.variant_key}, seed {k.seed_key}" for k in RUN_KINDS.values()]
    return "\n".join(["sweep keys:", *key_lines(rows), "", "kinds of run (sweep.experiment):", *kinds])


def format_results(summary: dict) -> str:
    """The result table printed at the end of `modformer train` and by `modformer eval`."""
    test = summary["test"]
    lines = [f"{summary['model']} on {summary['task']} (seed {summary['seed']}, step {summary['step']}, "
             f"{summary['parameters']['trainable']:,} of {summary['parameters']['total']:,} parameters trained)",
             "", f"  {'test metric':<24}{'value':>10}", f"  {'-' * 34}",
             *(f"  {key.replace('_', ' '):<24}{value:>10.4f}" for key, value in test.items()
               if isinstance(value, float)),
             f"  {'examples':<24}{test['examples']:>10d}"]
    for name, values in test["slices"].items():
        lines += ["", f"  {name:<12}{'accuracy':>12}{'examples':>10}", f"  {'-' * 34}"]
        lines += [f"  {v:<12}{s['accuracy']:>12.4f}{s['examples']:>10d}" for v, s in values.items()]
    return "\n".join(lines)


def cmd_train(args: argparse.Namespace) -> int:
    if args.resume and args.resume_if_any:
        raise ModformerError("give --resume (continue the run in --out) or --resume-if-any (continue it, or start "
                             "it where there is none), not both")
    if (args.resume or args.resume_if_any) and not args.out:
        flag = "--resume" if args.resume else "--resume-if-any"
        raise ModformerError(f"train {flag} continues the run in --out: name that run folder with --out")
    cfg = load_config(args.config, args.overrides)
    out = Path(args.out) if args.out else Path("runs") / Path(args.config).stem / time.strftime("%Y%m%d-%H%M%S")
    summary = api.train_run(cfg, out, resume="if_any" if args.resume_if_any else args.resume)
    print(format_results(summary))
    print(f"\nrun directory: {out}")
    return 0


def cmd_eval(args: argparse.Namespace) -> int:
    summary = api.evaluate_run(args.checkpoint, *args.overrides)
    print(json.dumps(summary, indent=2) if args.json else format_results(summary))
    return 0


def cmd_sweep(args: argparse.Namespace) -> int:
    if args.status:
        if args.config:
            raise ModformerError("--status takes a sweep directory and nothing else: modformer sweep --status DIR")
        print(format_status(Path(args.status)))
        return 0
    if not args.config:
        raise ModformerError("name a sweep config (modformer sweep CONFIG), or a sweep directory with --status DIR")
    name = "-".join([Path(args.config).stem, *args.profile])
    out = Path(args.out) if args.out else Path("runs") / "sweeps" / name
    slurm = {key: getattr(args, key) for key in SLURM_OPTIONS if getattr(args, key) is not None}
    path = api.sweep(args.config, out, *args.overrides, workers=args.workers, launcher=args.launcher,
                     slurm=slurm, wait=args.wait, profiles=args.profile, command=args.command, amend=args.amend,
                     plan_only=args.plan_only)
    if args.plan_only:
        print(f"plan recorded, no run started: {path}")
        return 0
    if path is None:  # submitted to Slurm, not followed
        print(f"submitted: {out}")
        return 0
    report = path.read_text()
    print(f"\n{summary_sections(report) or report}\n\nsweep finished: {out}\nreport: {path}")
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    folder = Path(args.folder)
    if not (folder / "sweep.yaml").is_file():
        raise ModformerError(f"{folder} is not a sweep directory (no sweep.yaml)")
    path = write_report(folder)  # each kind of run its own report (sweep.kinds.RunKind.report)
    print(path.read_text() if args.print else f"report: {path}")
    return 0


def cmd_curve(args: argparse.Namespace) -> int:
    table = write_curve([Path(d) for d in args.sweep_dirs], Path(args.out), args.where, args.x, args.metric)
    print(table.read_text() + f"\nfigure: {args.out}\ntable: {table}")
    return 0


def cmd_convert(args: argparse.Namespace) -> int:
    source = args.source
    if source == PACKAGED_TEACHER:  # the packaged SmolLM2, dequantized once into a Hugging Face folder
        source = packaged_teacher_folder()
    result = convert(source, args.to, args.out, threshold=args.threshold, hf=args.hf,
                     n_entries=args.n_entries, d_entry=args.d_entry)
    print(f"converted {result['source']} to the {result['to']} form: {result['out']}\n"
          f"parameters {result['parameters_before']:,} -> {result['parameters_after']:,}; largest logit "
          f"difference on random tokens (float64, weights stored in float32): {result['max_logit_difference']:.3g}")
    if "tokenizer" in result:
        print("tokenizer: " + (", ".join(result["tokenizer"]) + " copied" if result["tokenizer"] else
                               "none found beside the source; copy one into the folder before using it"))
    for i, errors in enumerate(result.get("layer_errors", [])):
        print(f"layer {i}: relative error " + ", ".join(f"{k} {v:.3g}" for k, v in errors.items()))
    if "task_before" in result:
        before, after = result["task_before"], result["task_after"]
        print(f"validation loss {before['loss']:.4f} -> {after['loss']:.4f}, "
              f"accuracy {before['accuracy']:.4f} -> {after['accuracy']:.4f}")
    return 0


def part_options_help(registry, name: str, key: str, given: dict | None = None) -> list[str]:
    """Help lines of one part: where it comes from, then each option with its type, default
    and help (`given`: the values a config sets, shown beside the defaults)."""
    part = registry[name]
    origin = source_version(part)
    lines = [f"{registry.key}={name} ({origin['import_path']}, {origin['version']})"]
    options = getattr(part, "Options", None)
    if options is None:
        return lines + ["  takes no options"]
    rows = describe(options, key)
    if given:  # each option's value in this config, found by its path below `key` (nested options too)
        def this(k: str) -> str:
            value = get_dotted(given, k[len(key) + 1:])
            return "" if value is None else f", this config {value!r}"

        rows = [(k, t, d + this(k), h) for k, t, d, h in rows]
    return lines + (key_lines(rows) if rows else ["  (an empty Options)"])


def config_parts_help(path: str, overrides=()) -> str:
    """The options of the parts a config names (its mixer and feed-forward module), for
    `modformer train --help CONFIG` and `modformer list CONFIG`."""
    cfg = load_config(path, overrides).model
    if not cfg.layers:
        return "\n".join([f"parts of {path} (set their options as model.mixer_options.KEY / model.ffn_options.KEY):",
                          *part_options_help(MIXERS, cfg.mixer, "model.mixer_options", cfg.mixer_options),
                          *part_options_help(FFNS, cfg.ffn, "model.ffn_options", cfg.ffn_options)])
    lines = [f"parts of {path}, per layer (set a layer's options as model.layers={{i: {{mixer_options: "
             f"{{KEY: VALUE}}}}}}, or in the config's model.layers):"]
    shown: dict[tuple, list[int]] = {}
    for i, layer in enumerate(cfg.layers):  # each distinct part once, with the layers that have it
        for registry, name, options in ((MIXERS, layer.mixer, layer.mixer_options), (FFNS, layer.ffn, layer.ffn_options)):
            shown.setdefault((registry.key, name, repr(options)), []).append(i)
    for (key, name, _), layers in shown.items():
        registry = MIXERS if key == MIXERS.key else FFNS
        option_key = f"model.layers[{','.join(map(str, layers))}].{'mixer' if registry is MIXERS else 'ffn'}_options"
        lines.append(f"layer{'s' if len(layers) > 1 else ''} {', '.join(map(str, layers))}:")
        lines += part_options_help(registry, name, option_key, cfg.layers[layers[0]].mixer_options
                                   if registry is MIXERS else cfg.layers[layers[0]].ffn_options)
    return "\n".join(lines)


def _loaded(registry, name: str) -> tuple[Any, str | None]:
    """(the part, None), or (None, why) for a part that does not load (another package's
    broken entry point) or whose Options a config could not give."""
    try:
        part = registry[name]
        if hasattr(part, "Options"):
            check_option_types(part.Options, f"{registry.key}={name}")
        return part, None
    except ConfigError as e:
        return None, str(e).split(": ", 1)[-1]


def _names(registry) -> list[str]:
    """Every name of a registry: ours, then other packages' entry points (not yet loaded)."""
    return [*registry.names(), *(n for n in registry.installed() if n not in registry)]


def _origin(registry, name: str) -> str:
    return "" if name in registry.names() and name not in registry.installed() else " [entry point]"


def _variant_line(name: str) -> str:
    v, broken = _loaded(VARIANTS, name)
    if broken:
        return f"  {name:<20}BROKEN{_origin(VARIANTS, name)}: {broken}"
    frozen = f"; freezes {', '.join(v.freeze)}" if v.freeze else ""
    return f"  {name:<20}{v.description}{frozen}{_origin(VARIANTS, name)}"


def cmd_list(args: argparse.Namespace) -> int:
    if args.config:
        print(config_parts_help(args.config, args.overrides))
        return 0
    if args.options:  # every part with options, those of installed packages loaded too
        print("variants (model.variant; a variant has no options: it is a builder and what it freezes):")
        print("\n".join(_variant_line(name) for name in _names(VARIANTS)))
        for registry, key in ((MIXERS, "model.mixer_options"), (FFNS, "model.ffn_options")):
            for name in _names(registry):
                _, broken = _loaded(registry, name)
                print(f"{registry.key}={name} BROKEN{_origin(registry, name)}: {broken}" if broken else
                      "\n".join(part_options_help(registry, name, key)))
        return 0
    print("variants (model.variant):")
    print("\n".join(_variant_line(name) for name in _names(VARIANTS)))
    print("constructions (model.construction):")
    for name in CONSTRUCTIONS:
        c = CONSTRUCTIONS[name]
        options = "" if c.Options is None else "; options (model.construction_options): " + ", ".join(
            f"{f.name} (default {f.default})" for f in dataclasses.fields(c.Options))
        alias = "".join(f" (also '{old}')" for old, new in CONSTRUCTIONS.aliases().items() if new == name)
        print(f"  {name}{alias}: {c.description}{options}")
    for title, registry, options in (("mixers (model.mixer)", MIXERS, "model.mixer_options"),
                                     ("feed-forward modules (model.ffn)", FFNS, "model.ffn_options")):
        print(f"{title}: " + ", ".join(f"{n}{_origin(registry, n)}" for n in _names(registry)))
        for name in _names(registry):  # parts with their own options (modformer/model/part_options.py)
            part, broken = _loaded(registry, name)
            if broken:
                print(f"  {name}: BROKEN: {broken}")
            elif hasattr(part, "Options"):
                print(f"  {name}: " + "; ".join(f"{k} ({t}, default {d}): {h}"
                                                for k, t, d, h in describe(part.Options, options)))
    print("tasks (task.name): " + ", ".join(f"{n}{_origin(TASKS, n)}" for n in _names(TASKS)))
    print("\n".join(describe_papers()))
    print("parts of your own: name them by import path, package.module:Class (examples/README.md); every part's "
          "options: modformer list --options; a config's parts: modformer train --help CONFIG")
    print("text sources (task.source of lm and sentiment):")
    for name, about in named_sources().items():
        print(f"  {name:<20}{about}")
    print(f"  {'PATH':<20}a .txt, .jsonl, .csv or .parquet file, or a folder of them")
    return 0


def train_arguments(p: argparse.ArgumentParser) -> None:
    describe_parser(p, "Train one model on one task.", _config_help())
    p.add_argument("config", help="YAML config with sections model, task, train")
    p.add_argument("overrides", nargs="*", metavar="key=value", help="dotted overrides, e.g. train.steps=200")
    p.add_argument("--out", help="run directory (default: runs/<config name>/<date-time>)")
    p.add_argument("--resume", action="store_true", help="continue the run in --out from its latest checkpoint "
                                                          "(refused where --out holds no run)")
    p.add_argument("--resume-if-any", action="store_true", help="continue the run in --out if it holds one, else "
                                                                "start it there (what a sweep's runs do)")
    p.set_defaults(func=cmd_train)


def eval_arguments(p: argparse.ArgumentParser) -> None:
    describe_parser(p, "Score a checkpoint (or a run directory's latest) on the held-out set.")
    p.add_argument("checkpoint", help="a checkpoint file or a run directory")
    p.add_argument("overrides", nargs="*", metavar="key=value", help="e.g. task.test_size=10000")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.set_defaults(func=cmd_eval)


def sweep_arguments(p: argparse.ArgumentParser) -> None:
    describe_parser(p, "Train every variant at every grid point with every seed (the same grid for every variant), "
                       "several runs at once. Run the same command again to continue a stopped sweep.", _sweep_help())
    p.add_argument("config", nargs="?", help="YAML run config plus a `sweep` section")
    p.add_argument("overrides", nargs="*", metavar="key=value", help="dotted overrides, e.g. sweep.seeds=[0,1,2]")
    p.add_argument("--profile", action="append", default=[], metavar="NAME",
                   help="apply the config's profile NAME (its `profiles` section: the experiment at another "
                        "budget or scale, e.g. budget, paper) before the overrides; repeatable")
    p.add_argument("--out", help="sweep directory (default: runs/sweeps/<config name>[-<profile>])")
    p.add_argument("--workers", type=int, help="runs at once (overrides sweep.workers)")
    p.add_argument("--amend", metavar="REASON", help="why this command changes the sweep's plan (more arms, seeds or "
                                                    "grid values, another metric): recorded in the folder's plan.yaml "
                                                    "and shown in its report; without it a change is refused")
    p.add_argument("--plan-only", action="store_true",
                   help="record the sweep and its plan (plan.yaml; with --amend, an amendment: e.g. the parameters of "
                        "its verdicts, sweep.verdict.*, declared after its runs) and start no run")
    p.add_argument("--status", metavar="DIR", help="say which runs of the sweep in DIR are done, queued, running, "
                                                   "unknown (Slurm cannot say), failed or cancelled, and stop")
    p.add_argument("--launcher", choices=LAUNCHERS, help="local (default) or slurm: submit the unfinished runs "
                                                         "as one Slurm job array (overrides sweep.launcher)")
    p.add_argument("--wait", action="store_true", help="with --launcher slurm: follow the jobs to their end, "
                                                       "then gather and report")
    for key, kind in SLURM_OPTIONS.items():
        p.add_argument(f"--{key.replace('_', '-')}", type=kind, dest=key,
                       help=f"overrides sweep.slurm.{key}: {field_help(SlurmConfig, key)}")
    p.set_defaults(func=cmd_sweep)


def report_arguments(p: argparse.ArgumentParser) -> None:
    describe_parser(p, "Write report.md and its plots (slices.png, curves.png) in a sweep directory, from its "
                       "records alone; a sweep of another kind of run (sweep.experiment) gets that kind's report.")
    p.add_argument("folder", metavar="DIR", help="a sweep directory")
    p.add_argument("--print", action="store_true", help="also print the report")
    p.set_defaults(func=cmd_report)


def curve_arguments(p: argparse.ArgumentParser) -> None:
    describe_parser(p, "Plot test accuracy (or --metric) against what the runs trained on (sequences, or tokens for "
                       "language modelling) or against width, one line per variant, from every finished run of the "
                       "given sweep folders that matches --where; write the figure and, beside it, a Markdown table "
                       "of its points with the folder each came from.")
    p.add_argument("sweep_dirs", nargs="+", help="sweep directories")
    p.add_argument("--out", required=True, help="the figure (.png); the table is written beside it as .md")
    p.add_argument("--where", action="append", default=[], metavar="KEY=VALUE",
                   help="only runs whose config has this value (repeatable), e.g. train.lr=0.003")
    p.add_argument("--x", choices=["sequences", "width"], default="sequences",
                   help="the x axis: sequences (the budget, in tokens for language modelling) or width")
    p.add_argument("--metric", default="accuracy",
                   help="the test metric on the y axis, as the runs' summaries name it (e.g. loss)")
    p.set_defaults(func=cmd_curve)


def convert_arguments(p: argparse.ArgumentParser) -> None:
    describe_parser(p, "Convert a modformer checkpoint (or run directory), or a local Hugging Face Llama-family "
                       "folder, to the knowledge form (every FFN a read of one shared base E = I, exact) or back "
                       "to ordinary FFNs. Writes a checkpoint and prints the largest logit difference it measured.")
    p.add_argument("source", help=f"checkpoint file, run directory, Hugging Face model folder, or "
                                  f"{PACKAGED_TEACHER} (the packaged teacher)")
    p.add_argument("--to", required=True, choices=["knowledge", "ffn"], help="the form to convert to")
    p.add_argument("--out", required=True, help="checkpoint file to write (a new folder with --hf)")
    p.add_argument("--threshold", default="linear", choices=["linear", "mlp", "none"],
                   help="threshold network of the knowledge layers (--to knowledge)")
    p.add_argument("--n-entries", type=int, help="with --to knowledge: entries of the shared base below d_ff "
                                                 "(approximate: each layer keeps its most important units)")
    p.add_argument("--d-entry", type=int, help="with --to knowledge: entry width below n_E (approximate: a joint "
                                               "truncated SVD across layers); per-layer errors are printed")
    p.add_argument("--hf", action="store_true",
                   help="with --to ffn: write --out as a Hugging Face LlamaForCausalLM folder (a knowledge model "
                        "with swiglu activation folds into Llama's MLP), reloaded to check its logits")
    p.set_defaults(func=cmd_convert)


def list_arguments(p: argparse.ArgumentParser) -> None:
    describe_parser(p, "List the registered variants, parts and tasks; with --options every part's options (type, "
                       "default, help), installed packages' parts included; with CONFIG the options of the parts "
                       "that config names (parts of your own too).")
    p.add_argument("config", nargs="?", help="a run config: show the options of its mixer and feed-forward module")
    p.add_argument("overrides", nargs="*", metavar="key=value", help="dotted overrides of CONFIG")
    p.add_argument("--options", action="store_true", help="every part's options, with type, default and help")
    p.set_defaults(func=cmd_list)


# Every command of the library, in the order `modformer --help` lists them; the papers' own
# commands follow (commands.COMMANDS, registered by the paper plugins: modformer/plugins.py).
LIBRARY = [
    Command("train", "train one model on one task", train_arguments),
    Command("eval", "score a checkpoint on its task's held-out set", eval_arguments),
    Command("sweep", "train variants x grid x seeds, resumably, and write a report", sweep_arguments),
    Command("report", "write a sweep's (or another experiment's) Markdown report and plots", report_arguments),
    Command("curve", "one budget or width curve from the runs of several sweeps", curve_arguments),
    Command("quote", "recompute the figures a Markdown file quotes from its sweep and benchmark records",
            quote_arguments),
    Command("signal", "signal propagation: token covariance and cosine across depth, at init or of trained runs",
            signal_command_arguments),
    Command("usage", "which knowledge entries each layer of a knowledge model reads", usage_arguments),
    Command("attention", "plot every layer's and head's attention map for one sequence", attention_arguments),
    Command("generate", "continue a text prompt with a trained language model", generate_arguments),
    Command("bench", "side-by-side benchmarks (ratios measured in one process)", bench_arguments),
    Command("convert", "write a model's FFNs as reads of one knowledge base, or fold them back", convert_arguments),
    Command("list", "list the registered variants, parts and tasks", list_arguments),
    Command("migrate", "bring folders an older modformer wrote up to today's records, once", migrate_arguments),
]


def all_commands() -> list[Command]:
    """The library's commands, then the papers' (what `modformer --help` lists)."""
    return [*LIBRARY, *COMMANDS.values()]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="modformer", description="Build transformers from parts, freeze or randomise them, train and compare.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command in all_commands():
        listed = {"help": command.help} if command.help else {}  # no help: an old name, not listed
        command.build(sub.add_parser(command.name, aliases=list(command.aliases), **listed))
    parser.train_parser = sub.choices["train"]  # for `train --help CONFIG` (_train_help_with_config)
    # No abbreviated options: `--resum` must not pass for `--resume` (or for nothing at all).
    for parser_ in (parser, *sub.choices.values()):
        parser_.allow_abbrev = False
    return parser


def _say_new_name(argv: list[str]) -> None:
    """An old command name works and says the new one."""
    for command in all_commands():
        if argv and argv[0] in command.aliases:
            print(f"modformer: `{argv[0]}` is now `modformer {command.name}`", file=sys.stderr)


def _train_help_with_config(parser: argparse.ArgumentParser, argv: list[str]) -> bool:
    """`modformer train --help CONFIG [overrides]`: the usual help, then the options of the parts
    CONFIG names (argparse alone prints its help before reading any argument)."""
    if not argv or argv[0] != "train" or not {"-h", "--help"} & set(argv):
        return False
    rest = [a for a in argv[1:] if a not in ("-h", "--help")]
    configs = [a for a in rest if not a.startswith("-") and "=" not in a]
    if not configs:
        return False
    print(parser.train_parser.format_help())
    print(config_parts_help(configs[0], [a for a in rest if "=" in a and not a.startswith("-")]))
    return True


def _check_out(out: str | None) -> None:
    """Refuse an `--out` that names no folder (empty) or one no file system holds (a name over 255
    bytes), before anything is written."""
    if out is None:
        return
    if not out.strip():
        raise ModformerError("--out is empty: name the folder (or file) to write, or leave --out out for the default")
    long = next((part for part in Path(out).parts if len(os.fsencode(part)) > 255), None)
    if long is not None:
        raise ModformerError(f"--out: the name '{long[:40]}...' is {len(os.fsencode(long))} bytes, over the 255 a "
                             f"file name may have")


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    argv = sys.argv[1:] if argv is None else argv
    try:
        if _train_help_with_config(parser, argv):
            return 0
    except ModformerError as e:
        print(f"modformer: error: {e}", file=sys.stderr)
        return 2
    _say_new_name(argv)
    # Overrides may come after options (`--out DIR train.steps=5`): collect the leftovers.
    args, extra = parser.parse_known_args(argv)
    unknown = [a for a in extra if a.startswith("-") or "=" not in a or not hasattr(args, "overrides")]
    if unknown:
        parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    if extra:
        args.overrides = [*args.overrides, *extra]
    args.command = ["modformer", *argv]  # as typed: what a sweep records as the command that started it
    try:
        _check_out(getattr(args, "out", None))
        return args.func(args)
    except ModformerError as e:
        print(f"modformer: error: {e}", file=sys.stderr)
        return 130 if isinstance(e, Interrupted) else 2
    except KeyboardInterrupt:
        print("modformer: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # output piped into `head` and the like
        sys.stderr.close()
        return 0
    except OSError as e:  # a full, read-only or failing disk: one line; anything else is a bug
        message = storage_fault(e)
        if message is None:
            raise
        print(f"modformer: error: {message}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
