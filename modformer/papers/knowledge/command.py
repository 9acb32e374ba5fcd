"""`modformer knowledge-pretrained {ladder,edit,repair,report} [CONFIG] [key=value ...] --out DIR`:
the knowledge base on a pretrained Llama (the packaged SmolLM2 by default, `model=FOLDER` for
any local one). Each experiment appends its records to DIR and skips what is recorded already;
`report` (and `modformer report DIR`) writes DIR/report.md and its plots from the records alone."""

from __future__ import annotations

import argparse
from pathlib import Path

import yaml

from ...commands import Command, ReportWriter, describe_parser
from ...configtools import apply_override, describe, from_dict, key_lines
from ...errors import ConfigError, ModformerError
from ...files import atomic_write_text, output_folder
from ...lock import take_lock
from .edits import EditRunConfig
from .ladder import LadderConfig
from .repair import RepairConfig

CONFIGS = {"ladder": LadderConfig, "edit": EditRunConfig, "repair": RepairConfig}
RECORDS = ("ladder.jsonl", "edits.jsonl", "repair.jsonl")


def _settings(overrides: list[str]) -> dict:
    """A YAML config (the first argument, when it names a file) with dotted overrides on top."""
    data: dict = {}
    if overrides and ("=" not in overrides[0] or Path(overrides[0]).is_file()):  # a sweep's run configs have '='s
        path = Path(overrides.pop(0))
        try:
            data = yaml.safe_load(path.read_text()) or {}
        except (OSError, yaml.YAMLError) as e:
            raise ConfigError(f"cannot read the config {path}: {str(e).splitlines()[0]}") from None
        if not isinstance(data, dict):
            raise ConfigError(f"{path}: expected a mapping of config keys")
        data.pop("sweep", None)  # what `modformer sweep` reads (sweep.experiment: knowledge_ladder)
    for assignment in overrides:
        apply_override(data, assignment)
    return data


def _run(args: argparse.Namespace) -> int:
    import os

    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # everything here is local; no minute of hub retries
    from .report import write_report

    out = Path(args.out)
    if args.experiment != "report":
        cfg = from_dict(CONFIGS[args.experiment], _settings(list(args.overrides)))
        if args.one_run:
            return _one_run(args.experiment, cfg, out)
        if args.experiment == "ladder":
            from .ladder import run_ladder
            run_ladder(cfg, out)
        elif args.experiment == "edit":
            from .edits import run_edits
            run_edits(cfg, out)
        else:
            from .repair import run_repair
            run_repair(cfg, out)
    elif not _holds(out):
        raise ModformerError(f"{out} holds no records of a ladder, edit or repair run ({', '.join(RECORDS)})")
    path = write_report(out)
    print(f"\n{path.read_text()}\nreport: {path}")
    return 0


def _one_run(experiment: str, cfg, out: Path) -> int:
    """One run of a sweep (knowledge_ladder, knowledge_edits) in `out`, one process at a time:
    its config, its records, then its summary.json, which marks it done."""
    if experiment == "ladder":
        from .ladder import run_ladder as measure
        from .sweep_kind import write_run_summary as summarize
    elif experiment == "edit":
        from .edits import run_edits
        from .edits_kind import write_edit_summary as summarize

        if not len(cfg.methods) == len(cfg.sizes) == len(cfg.seeds) == 1:
            raise ModformerError(f"--one-run edits one method, one size and one seed (a knowledge_edits sweep's run), "
                                 f"got methods {cfg.methods}, sizes {cfg.sizes}, seeds {cfg.seeds}")

        def measure(cfg, out):
            return run_edits(cfg, out, one_run=True)
    else:
        raise ModformerError("--one-run is one run of a ladder or edit sweep (sweep.experiment: knowledge_ladder, "
                             "knowledge_edits); repair runs in one folder only")
    output_folder(out)
    with take_lock(out / f"{experiment}.lock", wait=False, busy=(
            f"{out} is being measured by {{holder}}: one {experiment} run per folder (lock file {{path}})")):
        atomic_write_text(out / "config.yaml", yaml.safe_dump(cfg.to_dict(), sort_keys=False))
        measure(cfg, out)
        summarize(out, cfg)
    print(f"run: {out}")
    return 0


def _help() -> str:
    lines = []
    for name, cls in CONFIGS.items():
        lines += [f"{name} keys:", *key_lines(describe(cls, "")), ""]
    return "\n".join(lines)


def knowledge_pretrained_arguments(p: argparse.ArgumentParser) -> None:
    """The arguments and handler of `modformer knowledge-pretrained`."""
    describe_parser(p, "ladder: every FFN over ONE shared base E of several sizes, against each layer's own base "
                       "and per-layer low-rank FFNs of the same budget (held-out perplexity, known facts); edit: "
                       "edit capital facts through E alone against fine-tuning one down projection or every FFN "
                       "(efficacy, generalisation, specificity, perplexity); repair: train E (or E and the maps) "
                       "after compression; report: report.md and plots from the records. A stopped run continues.",
                    _help())
    p.add_argument("experiment", choices=[*CONFIGS, "report"])
    p.add_argument("overrides", nargs="*", metavar="[CONFIG] key=value",
                   help="a YAML file of config keys (below), then dotted overrides, e.g. sizes=[1,5]")
    p.add_argument("--out", required=True, help="experiment folder (records, report.md, plots)")
    p.add_argument("--one-run", action="store_true",
                   help="ladder and edit: measure in --out as one run of a sweep (sweep.experiment: knowledge_ladder, "
                        "knowledge_edits; an edit run: one method, size and seed) and write its summary.json")
    p.set_defaults(func=_run)


def _holds(folder: Path) -> bool:
    return any((folder / name).is_file() for name in RECORDS)


def _write(folder: Path) -> Path:
    from .report import write_report

    return write_report(folder)


COMMAND = Command("knowledge-pretrained", "the knowledge base on a pretrained Llama: compression ladder, fact "
                                          "editing, repair", knowledge_pretrained_arguments, aliases=("kb-pretrained",))
REPORT = ReportWriter("a pretrained knowledge-base experiment", _holds, _write)
