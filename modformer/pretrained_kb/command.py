"""`modformer kb-pretrained {ladder,edit,repair,report} --out DIR [key=value ...]`: the knowledge
base on a pretrained Llama (the packaged SmolLM2 by default, `model=FOLDER` for any local one).
Each experiment appends its records to DIR and skips what is recorded already; `report`
writes DIR/report.md and its plots from the records alone."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..configtools import apply_override, describe, from_dict, key_lines
from .edits import EditRunConfig
from .ladder import LadderConfig
from .repair import RepairConfig

CONFIGS = {"ladder": LadderConfig, "edit": EditRunConfig, "repair": RepairConfig}


def _run(args: argparse.Namespace) -> int:
    import os

    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # everything here is local; no minute of hub retries
    from .report import write_report

    out = Path(args.out)
    if args.experiment != "report":
        data: dict = {}
        for assignment in args.overrides:
            apply_override(data, assignment)
        cfg = from_dict(CONFIGS[args.experiment], data)
        if args.experiment == "ladder":
            from .ladder import run_ladder
            run_ladder(cfg, out)
        elif args.experiment == "edit":
            from .edits import run_edits
            run_edits(cfg, out)
        else:
            from .repair import run_repair
            run_repair(cfg, out)
    path = write_report(out)
    print(f"\n{path.read_text()}\nreport: {path}")
    return 0


def _help() -> str:
    lines = []
    for name, cls in CONFIGS.items():
        lines += [f"{name} keys:", *key_lines(describe(cls, "")), ""]
    return "\n".join(lines)


def add_kb_pretrained_command(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "kb-pretrained", help="the knowledge base on a pretrained Llama: compression ladder, fact editing, repair",
        description="ladder: every FFN over ONE shared base E of several sizes, against each layer's own base and "
                    "per-layer low-rank FFNs of the same budget (held-out perplexity, known facts); edit: edit "
                    "capital facts through E alone against fine-tuning one down projection or every FFN (efficacy, "
                    "generalisation, specificity, perplexity); repair: train E (or E and the maps) after "
                    "compression; report: report.md and plots from the records. A stopped run continues.",
        epilog=_help(), formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("experiment", choices=[*CONFIGS, "report"])
    p.add_argument("overrides", nargs="*", metavar="key=value", help="config keys (below), e.g. sizes=[1,5]")
    p.add_argument("--out", required=True, help="experiment folder (records, report.md, plots)")
    p.set_defaults(func=_run)
