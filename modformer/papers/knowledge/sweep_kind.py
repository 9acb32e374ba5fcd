"""The compression ladder as a sweep (`sweep.experiment: knowledge_ladder`): its arms are the
variants, its points the grid, each (arm, point) one `modformer knowledge-pretrained ladder
CONFIG --out RUN` process, with workers, `--launcher slurm`, `--status`, resume and
`modformer report` as for every sweep.

    model: smollm2-135m-instruct
    eval_blocks: 8
    sweep:
      experiment: knowledge_ladder
      variants: [original, shared, own, lowrank]
      grid: {points: [[[1, 0.875]], [[1, 0.75]], [[1, 0.5]], [[0.75, 0.75]]]}
      seeds: [0]

A run's summary holds its records (`records`; and, when there is one, that record's fields
at the top: `perplexity`, `facts_answered`, `parameters`, ...). An arm that has nothing at a
point (a base of its own only where n_E = d_ff) records none. The original model is the same
at every point: the report keeps it once.
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
from .ladder import LadderConfig
from .records import read_records
from .report import write_records_report


def write_run_summary(out: Path, cfg: LadderConfig) -> dict[str, Any]:
    """summary.json of one ladder run (what marks it done in a sweep), from its records."""
    if not (out / "ladder.jsonl").exists():  # nothing measured here: an empty list of records
        atomic_write_text(out / "ladder.jsonl", "")
    records = read_records(out / "ladder.jsonl")
    summary: dict[str, Any] = {**(records[0] if len(records) == 1 else {}), "arms": cfg.arms, "points": cfg.points,
                               "records": records, "code_version": code_version(), "machine": machine()}
    if not records:
        summary["note"] = f"nothing to measure: arm {cfg.arms} at {cfg.points} (a base of its own only at n_E = d_ff)"
    atomic_write_text(out / "summary.json", json.dumps(summary, indent=1) + "\n")
    return summary


def _command(config: Path, run_dir: Path) -> list[str]:
    return ["knowledge-pretrained", "ladder", str(config), "--out", str(run_dir)]


def _describe(summary: dict[str, Any]) -> str:
    records = summary.get("records", [])
    return "; ".join(f"{r['key']}: perplexity {r['perplexity']:.3f}, facts {r['facts_answered']}/{r['facts_total']}"
                     for r in records) or summary.get("note", "")


def write_ladder_sweep_report(sweep_dir: Path) -> Path:
    """report.md of a ladder sweep: every run's records in the folder form's order (the
    original first, once; then each point's arms), and the perplexity plot."""
    done = [r for r in read_results(sweep_dir).values() if r["status"] == "done"]
    if not done:
        raise ModformerError(f"{sweep_dir} has no finished run yet")
    records: dict[str, dict[str, Any]] = {}
    for run in done:
        for record in run["summary"].get("records", []):
            records.setdefault(record["key"], record)
    order = {"original": 0, "shared": 1, "own": 2, "lowrank": 3}
    points = {r["key"]: i for i, r in enumerate(records.values())}
    ladder = sorted(records.values(), key=lambda r: (r["arm"] != "original", _point(r), order[r["arm"]], points[r["key"]]))
    return write_records_report(sweep_dir, ladder, [], [], "each record's `command` and `seconds` in its run's "
                                                           "summary.json (runs/), the sweep's commands in commands.txt")


def _point(record: dict[str, Any]) -> tuple:
    """Where a record sits on the ladder: its base's size, a low-rank control beside the base it matches."""
    if record["arm"] == "lowrank":
        _, n, d = record["budget_of"].split("/")
        return (-int(n), -int(d))
    return (-record.get("n_entries", 0), -record.get("d_entry", 0))


KIND = RunKind("knowledge_ladder", "arms", "seed", lambda data: from_dict(LadderConfig, data), _command, _describe,
               write_ladder_sweep_report, variant_list=True, threads_key="threads",
               files=("summary.json", "ladder.jsonl", "config.yaml"))
