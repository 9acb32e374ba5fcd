"""`modformer modules`: run an LLM-Modules experiment (every arm x seed) and write its report."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..configtools import describe, key_lines
from .modules_config import ModulesConfig, load_modules_config


def _run(args: argparse.Namespace) -> int:
    from .experiment import ModulesExperiment  # transformers is imported only when an experiment runs
    from .modules_report import write_modules_report

    cfg = load_modules_config(args.config, args.overrides)
    out = Path(args.out) if args.out else Path("runs") / "modules" / Path(args.config).stem
    ModulesExperiment(cfg, out).run()
    path = write_modules_report(out)
    print(f"\n{path.read_text()}\nexperiment: {out}\nreport: {path}")
    return 0


def _report(args: argparse.Namespace) -> int:
    from .modules_report import write_modules_report

    path = write_modules_report(Path(args.out))
    print(path.read_text() if args.print else f"report: {path}")
    return 0


def _help() -> str:
    return "\n".join(["config keys:", *key_lines(describe(ModulesConfig, ""))])


def add_modules_command(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "modules", help="LLM Modules: a frozen teacher feeds a student through bridges; every arm x seed, one report",
        description="Train the student alone, with bridges to the real teacher, with bridges to matched noise "
                    "(the random-teacher control), distilled from the teacher, and with the reference's leaky "
                    "bridge, on the same data and seeds; score held-out items by exact match of generated answers. "
                    "Run the same command again to continue a stopped experiment.",
        epilog=_help(), formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("config", help="YAML experiment config (sections teacher, student, bridge, data, train)")
    p.add_argument("overrides", nargs="*", metavar="key=value", help="dotted overrides, e.g. train.steps=100")
    p.add_argument("--out", help="experiment folder (default: runs/modules/<config name>)")
    p.set_defaults(func=_run)
    r = subparsers.add_parser("modules-report", help="rewrite an LLM-Modules experiment's report",
                              description="Write report.md and curves.png of an experiment folder.")
    r.add_argument("out", help="an experiment folder")
    r.add_argument("--print", action="store_true", help="also print the report")
    r.set_defaults(func=_report)
