"""The random-attention paper's part of its experiments' reports and curves: how each run was
built (its reference script and every departure from it) and its budget as a fraction of
what that script trains, and that budget marked on budget curves."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ...constructions import construction_label
from ...errors import ModformerError
from ...sweep.runner import run_config
from .budget import PAPER_TASKS, REFERENCE_WIDTH, budget, budget_text, reference_budget
from .construction import task_name

HEADING = "## Construction and budget"


def run_facts(sweep_dir: Path, run: dict[str, Any]) -> tuple[str, str]:
    """(construction, budget text) of a finished run, both from its config.yaml."""
    config = run_config(sweep_dir, run)
    if config is None:
        raise ModformerError(f"{sweep_dir}: run {run['run_id']} has no config.yaml; its records are incomplete")
    return construction_label(config), budget_text(budget(config))


def construction_section(sweep_dir: Path, variants: list[str], groups, chosen) -> list[str]:
    """Which construction each chosen setting used and what fraction of the reference's budget."""
    lines = [HEADING, "",
             "Construction: `reference` is the paper's reference code (`model.construction: reference`), named by "
             "the script that trains the task and every setting that departs from that script's; `corrected` our "
             "defaults (docs/papers/random-attention.md, 'The reference construction'). Budget: what each run "
             "trained on and its width, against what the reference script that launches the task trains one model "
             "on, in that script's unit (`papers.random_attention.budget.REFERENCE_BUDGETS`, each with its source: "
             "depth.py's max_steps x train_size sequences for the algorithmic tasks, 1e8 for retrieval; "
             "hdmemorize_exp.py's 500 steps of 32,768 for memorization; the README's commands for language "
             "modelling, in tokens, and sentiment), and the paper's width 512.", "",
             "| variant | construction | budget |", "|---|---|---|"]
    for v in variants:
        facts = sorted({run_facts(sweep_dir, r) for r in groups[(v, chosen[v])]})
        lines += [f"| {v} | {c} | {b} |" for c, b in facts]
    return lines + [""]


def reference_mark(config: dict[str, Any], axis: str) -> tuple[float, str] | None:
    """The reference script's budget (axis "amount") or the paper's width (axis "width") for a
    run of one of the paper's tasks."""
    ref = reference_budget(config)
    if axis == "width":
        width = ref.width if ref else REFERENCE_WIDTH
        whose = "the paper's width" if width == REFERENCE_WIDTH else f"{ref.script}'s width"
        return (width, f"{whose} ({width:,})") if task_name(config) in PAPER_TASKS else None
    return None if ref is None else (ref.amount, f"{ref.script}'s {ref.unit} (~{ref.amount:.3g})")

