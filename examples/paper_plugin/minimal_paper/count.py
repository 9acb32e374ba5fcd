"""The minimal paper's kind of sweep run: each run counts to `n` and records it.

    sweep: {experiment: minimal_count, variants: [up, down], seeds: [0, 1], grid: {n: [3]}}
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from modformer.configtools import from_dict, option, to_dict
from modformer.files import atomic_write_text
from modformer.sweep.kinds import RunKind
from modformer.sweep.runner import read_results


@dataclass
class CountConfig:
    direction: str = option("up", "up or down: the arm")
    seed: int = option(0, "the seed, added to every count")
    n: int = option(3, "how many numbers a run records")
    threads: int | None = option(None, "CPU threads of a run (every kind has such a key; the sweep sets it)")

    def to_dict(self) -> dict[str, Any]:
        return to_dict(self)


def _run(args: argparse.Namespace) -> int:
    config = from_dict(CountConfig, yaml.safe_load(Path(args.config).read_text()) or {}, "config")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    values = [config.seed + (i if config.direction == "up" else -i) for i in range(config.n)]
    atomic_write_text(out / "config.yaml", yaml.safe_dump(config.to_dict()))
    atomic_write_text(out / "counts.jsonl", "".join(json.dumps({"value": v}) + "\n" for v in values))
    atomic_write_text(out / "summary.json", json.dumps({"total": sum(values)}))  # last: it marks the run done
    return 0


def run_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("config")
    p.add_argument("--out", required=True)
    p.set_defaults(func=_run)


def _report(sweep_dir: Path) -> Path:
    runs = sorted(read_results(sweep_dir).values(), key=lambda r: r["run_id"])
    lines = ["# Minimal counts", "", "| run | total |", "|---|---|"]
    lines += [f"| {r['run_id']} | {r['summary']['total']} |" for r in runs if r.get("status") == "done"]
    path = sweep_dir / "report.md"
    atomic_write_text(path, "\n".join(lines) + "\n")
    return path


KIND = RunKind("minimal_count", "direction", "seed", lambda data: from_dict(CountConfig, data, "config"),
               lambda config, run_dir: ["minimal-paper-run", str(config), "--out", str(run_dir)],
               lambda summary: f"total {summary['total']}", _report, threads_key="threads",
               files=("summary.json", "counts.jsonl", "config.yaml"))
