"""The short repair as a sweep (`sweep.experiment: knowledge_repair`): its arms (train E
alone, or E and every layer's maps) are the variants, each arm one `modformer
knowledge-pretrained repair CONFIG --out RUN` process, with workers, `--launcher
slurm`, `--status`, resume and `modformer report` as for every sweep.

    model: smollm2-135m-instruct
    point: [1.0, 0.875]
    sweep:
      experiment: knowledge_repair
      variants: [entries, entries_and_maps]
      grid: {steps: [16, 64]}
      seeds: [0]

The repair draws nothing at random, so one seed. A run's summary holds its record's fields
at the top (`perplexity`, `facts_answered`, `trained_parameters`, `losses`, ...).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ...configtools import from_dict
from ...errors import ModformerError
from ...files import atomic_write_text
from ...sweep.kinds import RunKind
from ...sweep.runner import read_results
from ...version import code_version, machine
from .records import read_records
from .repair import RepairConfig
from .report import write_records_report


def write_repair_summary(out: Path, cfg: RepairConfig) -> dict[str, Any]:
    """summary.json of one repair run (what marks it done in a sweep), from its record."""
    records = read_records(out / "repair.jsonl")
    if len(records) != 1:
        raise ModformerError(f"{out / 'repair.jsonl'}: a repair run records one arm, found {len(records)} records")
    summary = {**records[0], "config": cfg.to_dict(), "code_version": code_version(), "machine": machine()}
    atomic_write_text(out / "summary.json", json.dumps(summary, indent=1) + "\n")
    return summary


def _command(config: Path, run_dir: Path) -> list[str]:
    return ["knowledge-pretrained", "repair", str(config), "--out", str(run_dir)]


def _describe(summary: dict[str, Any]) -> str:
    return (f"perplexity {summary['perplexity']:.3f}, facts {summary['facts_answered']}/{summary['facts_total']}, "
            f"{summary['trained_parameters']:,} parameters trained")


def write_repair_sweep_report(sweep_dir: Path) -> Path:
    """report.md of a repair sweep: every finished run's record, in the sweep's order."""
    done = sorted((r for r in read_results(sweep_dir).values() if r["status"] == "done"), key=lambda r: r["run_id"])
    if not done:
        raise ModformerError(f"{sweep_dir} has no finished run yet")
    records = [{k: v for k, v in r["summary"].items() if k not in ("config", "machine")} for r in done]
    return write_records_report(sweep_dir, [], [], records, "each record's `command` and `seconds` in its run's "
                                                            "summary.json (runs/), the sweep's commands in commands.txt")


KIND = RunKind("knowledge_repair", "arms", "seed", lambda data: from_dict(RepairConfig, data), _command, _describe,
               write_repair_sweep_report, variant_list=True, threads_key="threads",
               files=("summary.json", "repair.jsonl", "config.yaml"))
