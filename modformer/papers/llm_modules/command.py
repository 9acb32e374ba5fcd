"""`modformer llm-modules CONFIG`: run an LLM-Modules experiment (every arm x seed) and write
its report; `modformer report DIR` rewrites the report of such a folder."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .config import LLMModulesConfig, load_llm_modules_config
from ...commands import Command, ReportWriter, describe_parser
from ...configtools import describe, key_lines
from ...errors import ModformerError


def _run(args: argparse.Namespace) -> int:
    from .experiment import LLMModulesExperiment  # transformers is imported only when an experiment runs
    from .report import write_modules_report

    cfg = load_llm_modules_config(args.config, args.overrides)
    out = Path(args.out) if args.out else Path("runs") / "llm_modules" / Path(args.config).stem
    if args.one_run:
        if not args.out:
            raise ModformerError("--one-run trains in the folder --out names: give --out")
        LLMModulesExperiment(cfg, out).run_one()
        print(f"run: {out}")
        return 0
    LLMModulesExperiment(cfg, out).run()
    path = write_modules_report(out)
    print(f"\n{path.read_text()}\nexperiment: {out}\nreport: {path}")
    return 0


def _report(args: argparse.Namespace) -> int:
    from .report import write_modules_report

    print("modformer: modules-report is now `modformer report DIR`", file=sys.stderr)
    if not _holds(Path(args.out)):
        raise ModformerError(f"{args.out} is not an LLM-Modules experiment folder (no config.yaml, split.json and "
                             f"runs/)")
    path = write_modules_report(Path(args.out))
    print(path.read_text() if args.print else f"report: {path}")
    return 0


def llm_modules_arguments(p: argparse.ArgumentParser) -> None:
    """The arguments and handler of `modformer llm-modules`."""
    describe_parser(p, "Train the student alone, with bridges to the real teacher, with bridges to matched noise "
                       "(the random-teacher control), distilled from the teacher, and with the reference's leaky "
                       "bridge, on the same data and seeds; score held-out items by exact match of generated "
                       "answers. Run the same command again to continue a stopped experiment. With a `sweep` section "
                       "(sweep.experiment: llm_modules), `modformer sweep CONFIG` runs the arms as variants: "
                       "workers, Slurm, --status.",
                    "\n".join(["config keys:", *key_lines(describe(LLMModulesConfig, ""))]))
    p.add_argument("config", help="YAML experiment config (sections teacher, student, bridge, data, train)")
    p.add_argument("overrides", nargs="*", metavar="key=value", help="dotted overrides, e.g. train.steps=100")
    p.add_argument("--out", help="experiment folder (default: runs/llm_modules/<config name>)")
    p.add_argument("--one-run", action="store_true",
                   help="train the config's one arm and seed in --out itself, as one run of a sweep (how "
                        "`modformer sweep` with sweep.experiment: llm_modules starts each run)")
    p.set_defaults(func=_run)


def modules_report_arguments(p: argparse.ArgumentParser) -> None:
    """`modformer modules-report DIR`, kept for old command lines: `modformer report DIR`."""
    describe_parser(p, "Write report.md and curves.png of an experiment folder (now `modformer report DIR`).")
    p.add_argument("out", help="an experiment folder")
    p.add_argument("--print", action="store_true", help="also print the report")
    p.set_defaults(func=_report)


def _holds(folder: Path) -> bool:
    # (a sweep's one run has split.json and config.yaml too, but no runs/ of arms)
    return (folder / "split.json").is_file() and (folder / "config.yaml").is_file() and (folder / "runs").is_dir()


def _write(folder: Path) -> Path:
    from .report import write_modules_report

    return write_modules_report(folder)


COMMANDS = (
    Command("llm-modules", "LLM Modules: a frozen teacher feeds a student through bridges; every arm x seed, "
                           "one report", llm_modules_arguments, aliases=("modules",)),
    Command("modules-report", "", modules_report_arguments),  # old name of `modformer report DIR`
)
REPORT = ReportWriter("an LLM-Modules experiment", _holds, _write)
