"""An LLM-Modules experiment as a sweep (`sweep.experiment: llm_modules`): each arm is a
variant, each (arm, grid point, seed) one run, trained by `modformer llm-modules CONFIG
--out RUN --one-run` in its own process, by local workers or a Slurm job array, with
`--status`, resume and `modformer report` as every sweep has them.

    sweep:
      experiment: llm_modules
      variants: [alone, teacher, random_teacher, distill, leaky]   # the arms
      seeds: [0, 1, 2]
      grid: {train.steps: [300, 1200]}                             # any config key but arms and seeds

Each run prepares its own data (the split is a function of the config; the teacher's states
come from the shared cache, written once by the first run that needs them).
"""

from __future__ import annotations

import itertools
import json
from collections import defaultdict
from pathlib import Path
from typing import Any

import yaml
from safetensors import SafetensorError, safe_open

from ...configtools import from_dict
from ...errors import ModformerError
from ...files import atomic_write_text
from ...sweep.kinds import RunKind
from ...sweep.report import point_label
from ...sweep.runner import read_results
from .config import LLMModulesConfig
from .report import report_lines


def _command(config: Path, run_dir: Path) -> list[str]:
    return ["llm-modules", str(config), "--out", str(run_dir), "--one-run"]


def _describe(summary: dict[str, Any]) -> str:
    return (f"held-out exact match {summary['held_out_exact']:.3f}, "
            f"held-out answer loss {summary['held_out_answer_loss']:.3f}")


def _started(run_dir: Path) -> str:
    """The step of a stopped run's checkpoint, from its header alone (not its tensors)."""
    checkpoint = run_dir / "checkpoint.safetensors"
    if not checkpoint.is_file():
        return ""
    try:
        with safe_open(str(checkpoint), framework="pt") as f:
            return f"checkpoint at step {int((f.metadata() or {})['step'])}"
    except (OSError, ValueError, KeyError, SafetensorError):
        return "checkpoint (unreadable)"


def _check(runs, folder) -> None:
    """Bridges a modformer student cannot take fail now, not in every run after its data."""
    for run in runs:
        cfg = run.config
        if cfg.student.model != "modformer":
            continue
        wrong = [p for p in cfg.bridge.places if p != "input" and not (
            p.startswith("block_") and p[6:].isdigit() and int(p[6:]) < cfg.student.n_layers)]
        if wrong:
            raise ModformerError(f"bridge.places: {wrong[0]!r} is no place of a {cfg.student.n_layers}-block student "
                                 f"(input, or block_i with i < {cfg.student.n_layers})")


def write_sweep_report(sweep_dir: Path) -> Path:
    """report.md of an LLM-Modules sweep: the experiment's report for each grid point (one
    point: the same report as an experiment folder's), from the records and run folders."""
    spec = yaml.safe_load((sweep_dir / "sweep.yaml").read_text())
    sw = spec["sweep"]
    done = [r for r in read_results(sweep_dir).values() if r["status"] == "done"]
    failed = sorted(r["run_id"] for r in read_results(sweep_dir).values() if r["status"] != "done")
    if not done:
        raise ModformerError(f"{sweep_dir} has no finished run yet")
    groups: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for r in done:
        groups[(r["variant"], point_label(r["point"]))].append(r)
    grid = [point_label(dict(zip(sw["grid"], values))) for values in itertools.product(*sw["grid"].values())]
    points = [p for p in grid if any(q == p for _, q in groups)]
    several = len(points) > 1
    lines = [f"# Sweep report: {sweep_dir.name}", ""] if several else []
    for i, point in enumerate(points):
        runs = [r for (v, p), rs in groups.items() if p == point for r in rs]
        first = sweep_dir / runs[0]["run_dir"]
        cfg = yaml.safe_load((first / "config.yaml").read_text())
        cfg["arms"] = [v for v in sw["variants"] if any(r["variant"] == v for r in runs)]
        by_arm = {arm: [r["summary"] for r in runs if r["variant"] == arm] for arm in cfg["arms"]}
        metrics = {arm: [sweep_dir / r["run_dir"] / "metrics.jsonl" for r in runs if r["variant"] == arm]
                   for arm in cfg["arms"]}
        figure = sweep_dir / (f"curves_{i}.png" if several else "curves.png")
        if several:
            lines += [f"Setting: {point}.", ""]
        lines += report_lines(cfg, json.loads((first / "split.json").read_text()), by_arm,
                              lambda arm: metrics[arm], figure, level=2 if several else 1)
        lines.append("")
    lines += [f"Runs: {len(done)} done" + (f"; not done: {', '.join(failed)}" if failed else "") +
              f". Sweep folder: {len(sw['variants'])} arms x {max(1, len(points))} setting(s) x "
              f"{len(sw['seeds'])} seeds; commands in commands.txt."]
    path = sweep_dir / "report.md"
    atomic_write_text(path, "\n".join(lines) + "\n")
    return path


KIND = RunKind("llm_modules", "arms", "seeds", lambda data: from_dict(LLMModulesConfig, data), _command,
               _describe, write_sweep_report, check=_check, started=_started, variant_list=True, seed_list=True)

