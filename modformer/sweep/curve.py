"""One budget (or width) curve from the runs of several sweeps.

A curve's points often come from different sweeps: the 1x point from the sweep that made a
verdict, the 4x and 16x points from a budget sweep run later, width 512 from a run that did
not fit with the others. `modformer curve DIR... --out FILE.png` draws test accuracy (or
another test metric, e.g. `--metric loss`) against what the runs trained on (sequences, or
tokens for language modelling; `train.budget.trained`) or against width, one line
per variant, from every finished run of those folders that matches `--where` (e.g.
`train.lr=0.003`, so that a sweep whose grid held two rates adds only the runs comparable
with the others), and writes beside the figure a Markdown table of every point with the
folder it came from, so that the figure can be traced to committed records.

    modformer curve results/random_attention/addition_reference results/random_attention/addition_budget \\
        --where train.lr=0.003 --out results/random_attention/addition_curve.png
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any, Sequence

import yaml

from ..configtools import apply_override, flatten
from ..errors import ModformerError
from ..files import atomic_write_text
from ..stats import metric_bounds, summarize
from ..train.budget import trained
from .budget_plot import draw_curves
from .runner import read_results, run_config
from .sections import mark as paper_mark
from .sections import papers_of

# --x: what the runs trained on, in their reference trainer's unit (sequences, or tokens for
# language modelling; the flag keeps its name), or their width.
AXES = ("sequences", "width")


# Keys that say how a run was carried out, not what it trained: runs that differ only in these
# (and in their seed) are seeds of one setting.
OPERATIONAL = {"train.seed", "train.eval_every", "train.log_every", "train.checkpoint_every", "train.keep_checkpoints",
               "train.progress", "train.threads", "train.log_to", "train.log_group", "train.mlflow_uri",
               "train.eval_batch_size", "train.device", "train.compile", "train.activation_checkpointing",
               "train.induction_scores"}


def _check_one_setting(variant: str, x: float, runs: list[tuple[dict[str, Any], str]], axis: str) -> None:
    """The runs of one point must be seeds of one setting: refuse different settings (their mean
    would be no setting's) and a seed given twice (one run counted twice, e.g. from two sweeps)."""
    settings = [{k: v for k, v in flat.items() if k not in OPERATIONAL} for flat, _ in runs]
    differ = sorted({k for s in settings for k in s if any(o.get(k) != s.get(k) for o in settings)})
    if differ:
        values = ", ".join(f"{k} ({', '.join(sorted({str(s.get(k)) for s in settings}))})" for k in differ[:3])
        raise ModformerError(f"the runs of {variant} at {axis} {x:,} differ in {values}: one point would average "
                             f"different settings; choose one with --where KEY=VALUE")
    seeds = [flat.get("train.seed") for flat, _ in runs]
    twice = sorted({s for s in seeds if s is not None and seeds.count(s) > 1}, key=str)
    if twice:
        folders = sorted({d for flat, d in runs if flat.get("train.seed") == twice[0]})
        raise ModformerError(f"the runs of {variant} at {axis} {x:,} hold seed {twice[0]} more than once (from "
                             f"{', '.join(folders)}): drop one folder, or choose with --where KEY=VALUE")


def _where(assignments: Sequence[str]) -> dict[str, Any]:
    """`KEY=VALUE` filters: dotted key -> value, parsed as config overrides are (`apply_override`);
    a value that is a mapping stays one (`model.layers={-1: standard}` is one filter)."""
    filters: dict[str, Any] = {}
    for assignment in assignments:
        data: dict[str, Any] = {}
        apply_override(data, assignment)
        key = assignment.split("=", 1)[0]
        node = data
        for part in key.split("."):
            node = node[part]
        filters[key] = node
    return filters


_MISSING = object()


def _value(run: dict[str, Any], config: dict[str, Any], key: str) -> Any:
    """A run's value of `key`: as its sweep's grid gave it where the key is a grid axis (a stack
    is recorded resolved in config.yaml, written as given in the grid), else its config's."""
    if key in (run.get("point") or {}):
        return run["point"][key]
    node: Any = config
    for part in key.split("."):
        if not isinstance(node, dict) or part not in node:
            return _MISSING
        node = node[part]
    return node


def _same(value: Any, wanted: Any) -> bool:
    """A config value against a filter's; YAML reads 3e-3 as a string (it wants 3.0e-3), which
    a config's float field takes as the number, so the filter does too. A mapping is compared
    as results.jsonl records it (as JSON: its keys strings, `{-1: x}` as `{"-1": x}`)."""
    if isinstance(value, (dict, list)) or isinstance(wanted, (dict, list)):
        return json.dumps(value, sort_keys=True) == json.dumps(wanted, sort_keys=True)
    if isinstance(value, float) and isinstance(wanted, str):
        try:
            wanted = float(wanted)
        except ValueError:
            return False
    return value == wanted


def curve_points(sweep_dirs: Sequence[Path], where: Sequence[str] = (), axis: str = "sequences",
                 metric: str = "accuracy") -> dict[str, dict[float, list[tuple[float, str]]]]:
    """variant -> x (sequences or width) -> [(test `metric`, sweep folder name)] over every
    finished run of `sweep_dirs` whose config matches every `where` filter. Each point's runs
    must be distinct seeds of one setting (`_check_one_setting`)."""
    if axis not in AXES:
        raise ModformerError(f"--x must be one of {', '.join(AXES)}, got '{axis}'")
    filters = _where(where)
    points: dict[str, dict[float, list[tuple[float, str]]]] = defaultdict(lambda: defaultdict(list))
    configs: dict[tuple[str, float], list[tuple[dict[str, Any], str]]] = defaultdict(list)
    for sweep_dir in map(Path, sweep_dirs):
        if not (sweep_dir / "sweep.yaml").exists():
            raise ModformerError(f"{sweep_dir} is not a sweep directory (no sweep.yaml)")
        for run in read_results(sweep_dir).values():
            if run["status"] != "done":
                continue
            config = run_config(sweep_dir, run)
            if config is None:
                raise ModformerError(f"{sweep_dir}: run {run['run_id']} has no config.yaml; its records are incomplete")
            flat = flatten(config)
            values = {k: _value(run, config, k) for k in filters}
            unknown = [k for k, v in values.items() if v is _MISSING]
            if unknown:
                raise ModformerError(f"--where {unknown[0]}: no such config key in {sweep_dir} "
                                     f"(run {run['run_id']})")
            if not all(_same(values[k], v) for k, v in filters.items()):
                continue
            test = run["summary"]["test"]
            if metric not in test:
                raise ModformerError(f"--metric {metric}: run {run['run_id']} of {sweep_dir} has no such test metric "
                                     f"(it has {', '.join(sorted(test))})")
            b = trained(config)
            x = b["amount"] if axis == "sequences" else b["width"]
            points[run["variant"]][x].append((test[metric], sweep_dir.name))
            configs[(run["variant"], x)].append((flat, sweep_dir.name))
    if not points:
        raise ModformerError("no finished run of " + ", ".join(map(str, sweep_dirs)) + " matches "
                             + (" ".join(where) if where else "(no filter)"))
    for (variant, x), runs in configs.items():
        _check_one_setting(variant, x, runs, axis)
    return points


def _paper_mark(sweep_dirs: Sequence[Path], axis: str) -> tuple[str, tuple[float, str] | None]:
    """(x's unit, the mark of the paper whose experiment the first sweep is, or None): the unit
    is the first run's (sequences, or tokens for language modelling), or width."""
    sweep_dir = Path(sweep_dirs[0])
    spec = yaml.safe_load((sweep_dir / "sweep.yaml").read_text()) if (sweep_dir / "sweep.yaml").exists() else {}
    for run in read_results(sweep_dir).values():
        config = run_config(sweep_dir, run)
        if config is not None:
            papers = papers_of((spec.get("sweep") or {}).get("paper"), [config])
            field = "width" if axis == "width" else "amount"
            unit = "width" if axis == "width" else trained(config)["unit"]
            return unit, paper_mark(papers, config, field)
    return ("width" if axis == "width" else "sequences"), None


def write_curve(sweep_dirs: Sequence[Path], out: Path, where: Sequence[str] = (), axis: str = "sequences",
                metric: str = "accuracy") -> Path:
    """Draw the curve to `out` (.png) and its table to the same name with .md; returns the table's path."""
    points = curve_points(sweep_dirs, where, axis, metric)
    unit, marked = _paper_mark(sweep_dirs, axis)
    mark, whose = (None, "") if marked is None else marked
    out = Path(out)
    draw_curves({variant: {x: [value for value, _ in runs] for x, runs in xs.items()}
                 for variant, xs in points.items()}, unit, marked, out, metric)
    lines = [f"# {out.stem}: test {metric} against {unit}", "",
             f"From {', '.join(f'`{Path(d)}`' for d in sweep_dirs)}"
             + (f", runs with {', '.join(f'`{w}`' for w in where)}" if where else "")
             + (f"; marked: {whose}" if mark is not None else "")
             + f". Figure: [{out.name}]({out.name}).", "",
             f"| variant | {unit} |" + (" fraction of the mark |" if mark is not None else "")
             + f" seeds | test {metric} (mean ± std [95% interval]) | from |",
             "|---" * (6 if mark is not None else 5) + "|"]
    for variant, xs in sorted(points.items()):
        for x, runs in sorted(xs.items()):
            stats = summarize([value for value, _ in runs])
            lines.append(f"| {variant} | {x:,} |" + (f" {x / mark:.3g} |" if mark is not None else "") + f" {len(runs)} | "
                         f"{stats.format(bounds=metric_bounds(metric))} | {', '.join(sorted({d for _, d in runs}))} |")
    command = ["modformer curve", *map(str, sweep_dirs), *(f"--where {w}" for w in where),
               f"--x {axis}",
               *([f"--metric {metric}"] if metric != "accuracy" else []), f"--out {out}"]
    lines += ["", "Reproduce:", "", "    " + " ".join(command)]
    table = out.with_suffix(".md")
    atomic_write_text(table, "\n".join(lines) + "\n")
    return table
