"""`modformer llm-modules CONFIG`: an LLM-Modules experiment (every arm x seed) as the sweep
`modformer sweep CONFIG` runs, its arms the variants; `--one-run` trains one arm and one seed
in its folder, as each run of such a sweep does."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from .config import LLMModulesConfig, load_llm_modules_config
from ...commands import Command, describe_parser
from ...configtools import describe, key_lines
from ...errors import ModformerError


def _run(args: argparse.Namespace) -> int:
    cfg = load_llm_modules_config(args.config, args.overrides)
    if args.one_run:
        from .experiment import LLMModulesExperiment  # transformers is imported only when a run trains

        if not args.out:
            raise ModformerError("--one-run trains in the folder --out names: give --out")
        LLMModulesExperiment(cfg, Path(args.out)).run_one()
        print(f"run: {args.out}")
        return 0
    from ...api import sweep

    out = Path(args.out) if args.out else Path("runs") / "llm_modules" / Path(args.config).stem
    # The config's arms and seeds are the sweep's variants and seeds; every other sweep key as its file says.
    report = sweep(args.config, out, *args.overrides, "sweep.experiment=llm_modules",
                   f"sweep.variants={json.dumps(cfg.arms)}", f"sweep.seeds={json.dumps(cfg.seeds)}",
                   command=args.command)
    if report is not None:
        print(f"\n{report.read_text()}\nsweep: {out}\nreport: {report}")
    return 0


def llm_modules_arguments(p: argparse.ArgumentParser) -> None:
    """The arguments and handler of `modformer llm-modules`."""
    describe_parser(p, "Train the student alone, with bridges to the real teacher, with bridges to matched noise "
                       "(the random-teacher control), distilled from the teacher, and with the reference's leaky "
                       "bridge, on the same data and seeds; score held-out items by exact match of generated "
                       "answers. The experiment is a sweep (sweep.experiment: llm_modules) whose variants are the "
                       "config's arms and whose seeds are its seeds, in the sweep folder --out: workers, Slurm, "
                       "--status and `modformer report` as for every sweep; `modformer sweep CONFIG` runs the same "
                       "from the config's sweep section. Run the same command again to continue a stopped one.",
                    "\n".join(["config keys:", *key_lines(describe(LLMModulesConfig, ""))]))
    p.add_argument("config", help="YAML experiment config (sections teacher, student, bridge, data, train)")
    p.add_argument("overrides", nargs="*", metavar="key=value", help="dotted overrides, e.g. train.steps=100")
    p.add_argument("--out", help="sweep folder (default: runs/llm_modules/<config name>); with --one-run, the run's")
    p.add_argument("--one-run", action="store_true",
                   help="train the config's one arm and seed in --out itself, as one run of a sweep (how "
                        "`modformer sweep` with sweep.experiment: llm_modules starts each run)")
    p.set_defaults(func=_run)


COMMAND = Command("llm-modules", "LLM Modules: a frozen teacher feeds a student through bridges; every arm x seed as "
                                 "a sweep, one report", llm_modules_arguments, aliases=("modules",))
