"""The minimal paper's report section, curve mark and summary command."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from modformer.sweep.runner import read_results

BUDGET = 10_000  # sequences: the line its budget curves mark


def section(sweep_dir: Path, variants: list[str], groups: dict, chosen: dict) -> list[str]:
    """The seeds behind each variant's chosen setting (groups: (variant, setting) -> runs)."""
    lines = ["## Minimal paper", "", "| variant | chosen setting | seeds |", "|---|---|---|"]
    lines += [f"| {v} | `{chosen[v]}` | {len(groups[(v, chosen[v])])} |" for v in variants]
    return lines + [""]


def mark(config: dict[str, Any], axis: str) -> tuple[float, str] | None:
    return (BUDGET, f"the minimal paper's budget ({BUDGET:,} sequences)") if axis == "amount" else None


def _summary(args: argparse.Namespace) -> int:
    runs = read_results(Path(args.sweep_dir))
    done = sum(1 for r in runs.values() if r.get("status") == "done")
    print(f"minimal paper: {done} of {len(runs)} recorded runs finished in {args.sweep_dir}")
    return 0


def summary_arguments(p: argparse.ArgumentParser) -> None:
    p.description = "How many runs of a sweep are finished."
    p.add_argument("sweep_dir")
    p.set_defaults(func=_summary)
