"""The report of a sweep: Markdown tables and PNG plots, from the sweep directory's files only.

Each variant's setting is chosen on the validation set (mean over seeds of `sweep.metric`),
and the test set is then reported for that setting: the test set never chooses anything.
Every figure is a mean over seeds with its standard deviation and 95% t interval.
"""

from __future__ import annotations

import itertools
import json
from collections import defaultdict
from pathlib import Path
from typing import Any

import yaml

from ..errors import ModformerError
from ..figures import plt, save_figure
from ..files import atomic_write_text
from ..train.mfu import OWN
from ..train.records import read_records
from .budget_plot import plot_budget
from .kinds import kind_in
from .runner import read_results, run_config
from .sections import PRINTED, SECTIONS, papers_of
from .plan import plan_lines
from ..stats import metric_bounds, summarize
from ..tasks.base import TaskConfig


def _load(sweep_dir: Path) -> tuple[dict[str, Any], list[dict[str, Any]], list[dict[str, Any]]]:
    path = sweep_dir / "sweep.yaml"
    if not path.exists():
        raise ModformerError(f"{sweep_dir} is not a sweep directory (no sweep.yaml)")
    results = list(read_results(sweep_dir).values())  # refuses records of another format
    spec = yaml.safe_load(path.read_text())
    done = [r for r in results if r["status"] == "done"]
    if not done:
        raise ModformerError(f"{sweep_dir} has no finished run yet")
    return spec, done, [r for r in results if r["status"] != "done"]


def point_label(point: dict[str, Any]) -> str:
    """A grid point as the report shows it: `train.lr=0.001, model.train_only=["blocks.*.ffn.*"]`.
    Values are written as JSON, so that distinct points never share a label (the string "1"
    and the number 1, ["a, b"] and ["a", "b"]); folder names lose that, the report must not."""
    return ", ".join(f"{k}={json.dumps(v)}" for k, v in point.items()) or "default"


def grid_order(groups: dict[tuple[str, str], list[dict]], variants: list[str],
               grid: dict[str, list]) -> list[tuple[tuple[str, str], list[dict]]]:
    """The groups in the sweep's own order: variants as listed, grid points as the grid
    lists them (steps 200, 800, 3200, not the text order 200, 3200, 800)."""
    points = [point_label(dict(zip(grid, values))) for values in itertools.product(*grid.values())]

    def key(item):
        variant, point = item[0]
        return (variants.index(variant) if variant in variants else len(variants), variant,
                points.index(point) if point in points else len(points), point)

    return sorted(groups.items(), key=key)


def choose(groups: dict[tuple[str, str], list[dict]], metric: str, mode: str, seeds: int) -> dict[str, str]:
    """variant -> its grid point with the best mean validation metric, among the points
    whose every seed finished (a point with one lucky seed must not beat a complete one).
    The test set takes no part."""
    best: dict[str, tuple[float, str]] = {}
    for (variant, point), runs in sorted(groups.items()):
        if len(runs) < seeds:
            continue
        try:
            value = summarize([r["summary"]["validation"][metric] for r in runs]).mean
        except KeyError:
            raise ModformerError(f"runs report no validation metric '{metric}' (sweep.metric)") from None
        score = value if mode == "max" else -value
        if variant not in best or score > best[variant][0]:
            best[variant] = (score, point)
    return {v: p for v, (_, p) in best.items()}


def _cell(values: list[float], metric: str = "accuracy") -> str:
    return summarize(values).format(bounds=metric_bounds(metric))


def _test_accuracy(summaries: list[dict]) -> str:
    """The runs' test accuracy cell; n/a for a task that has none (a regression: its own
    metrics are in the table of other test metrics)."""
    if any("accuracy" not in x["test"] for x in summaries):
        return "n/a"
    return _cell([x["test"]["accuracy"] for x in summaries])


def _mfu(summaries: list[dict]) -> str:
    """The range of the runs' model FLOPs utilisation (modformer.train.mfu); 'n/a' for runs
    recorded before summaries held it (it cannot be measured again afterwards)."""
    values = [x["mfu"]["mfu"] for x in summaries if "mfu" in x]
    if not values:
        return "n/a"
    low, high = min(values), max(values)
    # * where some run counted the standard model's FLOPs, not its own
    estimate = "*" if any(x["mfu"]["flops_of"] != OWN for x in summaries if "mfu" in x) else ""
    return (f"{low:.1%}" if f"{low:.1%}" == f"{high:.1%}" else f"{low:.1%}-{high:.1%}") + estimate


def _model_names(done: list[dict]) -> dict[str, str]:
    """variant -> what its runs' summaries call the model, where all its runs agree (a grid over
    model.mixer names the mixer in each setting instead)."""
    seen: dict[str, set[str]] = defaultdict(set)
    for r in done:
        seen[r["variant"]].add(r["summary"]["model"])
    return {v: next(iter(names)) for v, names in seen.items() if len(names) == 1}


def write_report(sweep_dir: str | Path) -> Path:
    sweep_dir = Path(sweep_dir)
    spec, done, failed = _load(sweep_dir)
    sw = spec["sweep"]
    kind = kind_in(spec)
    if kind.report is not None:  # another kind of run has its own report
        return kind.report(sweep_dir)
    metric, mode = sw["metric"], sw["mode"]
    # Each variant under the name of what ran (a part of yours or a stack named: `variants.base.run_label`);
    # arms named in the sweep file keep their names, and the header says what each runs.
    arms = sw["variants"] if isinstance(sw["variants"], dict) else None
    names = {} if arms else _model_names(done)
    groups: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for r in done:
        groups[(names.get(r["variant"], r["variant"]), point_label(r["point"]))].append(r)
    listed = [names.get(v, v) for v in sw["variants"]]
    chosen = choose(groups, metric, mode, len(sw["seeds"]))
    variants = [v for v in listed if v in chosen]
    incomplete = sorted(f"{v}/{p} ({len(r)} of {len(sw['seeds'])} seeds)" for (v, p), r in groups.items()
                        if len(r) < len(sw["seeds"]))
    points = [point_label(dict(zip(sw["grid"], values))) for values in itertools.product(*sw["grid"].values())]
    unstarted = [f"{v}/{p}" for v in listed for p in points if (v, p) not in groups]
    model, task, train = spec.get("model", {}), spec.get("task", {}), spec.get("train", {})

    lines = [f"# Sweep report: {sweep_dir.name}", ""]
    lines += [f"Task `{task.get('name', TaskConfig().name)}` ({', '.join(f'{k}={v}' for k, v in task.items() if k != 'name')}); "
              f"base model {', '.join(f'{k}={v}' for k, v in model.items()) or 'defaults'}; "
              f"training {', '.join(f'{k}={v}' for k, v in train.items()) or 'defaults'}.", ""]
    lines += [f"Variants: {', '.join(listed)}. Seeds: {_seeds_text(done, listed)}. The same grid for every variant: "
              + (", ".join(f"`{k}` in {v}" for k, v in sw["grid"].items()) or "no grid (one setting)") + ".", ""]
    beyond = _beyond_grid(done, sw["grid"])
    if beyond:
        lines += ["Runs beyond that grid, from later commands (commands.txt): " + "; ".join(
            f"`{k}={json.dumps(v)}` ({', '.join(vs)})" for (k, v), vs in beyond.items()) + ".", ""]
    if arms:
        lines += ["Arms: " + "; ".join(f"`{name}` = " + ", ".join(
            [str((given or {}).get("variant", name))]
            + [f"`{k}={json.dumps(v)}`" for k, v in (given or {}).items() if k != "variant"])
            for name, given in arms.items()) + ".", ""]
    lines += [f"Each variant's setting is chosen by the mean validation {metric} ({mode}) over seeds; the test "
              f"set is reported only for that setting. Cells: mean ± std [95% t interval] over seeds "
              f"(intervals clipped to the metric's range: [0, 1] for accuracies, >= 0 for losses).", ""]
    lines += plan_lines(sweep_dir)
    if len(sw["seeds"]) < 3:
        lines += [f"**Warning: {len(sw['seeds'])} seed(s); at least 3 are needed for the intervals to mean much.**", ""]
    if failed:
        lines += [f"**{len(failed)} run(s) failed and are left out:** " + ", ".join(r["run_id"] for r in failed), ""]
    if incomplete:
        lines += ["**Grid points with unfinished seeds (shown in the grid, never chosen):** "
                  + ", ".join(incomplete), ""]
    if unstarted:
        lines += ["**Grid points with no finished run yet (not shown; the same sweep command continues "
                  "them):** " + ", ".join(unstarted), ""]

    # A paper's experiment (its construction, or sweep.paper) gets that paper's sections.
    configs = [run_config(sweep_dir, r) for v in variants for r in groups[(v, chosen[v])]]
    papers = papers_of(sw.get("paper"), configs)
    for paper in papers:
        for section in SECTIONS.get(paper, []):
            lines += section(sweep_dir, variants, groups, chosen)
    lines += ["## Chosen setting per variant", "",
              f"| variant | setting | seeds | validation {metric} | test accuracy | test loss | trainable params "
              "| tokens/s | MFU |", "|---|---|---|---|---|---|---|---|---|"]
    for v in variants:
        runs = groups[(v, chosen[v])]
        s = [r["summary"] for r in runs]
        lines.append(f"| {v} | `{chosen[v]}` | {len(runs)} | {_cell([x['validation'][metric] for x in s], metric)} | "
                     f"{_test_accuracy(s)} | {_cell([x['test']['loss'] for x in s], 'loss')} | "
                     f"{s[0]['parameters']['trainable']:,} | {summarize([x['tokens_per_s'] for x in s]).mean:,.0f} | "
                     f"{_mfu(s)} |")
    lines += ["", "tokens/s: the mean over seeds; MFU: the range over seeds of the model's own training FLOPs per "
              "token times tokens/s, against a matrix-multiply peak in the run's precision measured in each run "
              "(`modformer.train.mfu`); * marks the standard model's FLOPs of the same sizes instead, an estimate for "
              "a model whose parts' FLOPs are not known (a part of yours, knowledge reads). Over every run of this "
              f"sweep: MFU {_mfu([r['summary'] for r in done])}.", ""]

    aux = sorted({k for v in variants for r in groups[(v, chosen[v])] for k in r["summary"].get("aux", {})})
    if aux:  # the parts' own losses (modformer/model/aux.py), unweighted, last logged window
        lines += ["## Auxiliary losses (chosen settings; the last logged training window, unweighted)", "",
                  "| variant | " + " | ".join(f"`{k}`" for k in aux) + " |", "|---" * (len(aux) + 1) + "|"]
        for v in variants:
            runs = groups[(v, chosen[v])]
            values = [[r["summary"]["aux"][k] for r in runs if k in r["summary"].get("aux", {})] for k in aux]
            # "term", not "loss": an auxiliary loss may be negative, so its interval is not clipped at 0
            lines.append(f"| {v} | " + " | ".join(_cell(x, "term") if x else "n/a" for x in values) + " |")
        lines.append("")

    shown = {"accuracy", "loss"}
    extra = sorted({k for r in done for k, v in r["summary"]["test"].items() if isinstance(v, float)} - shown)
    if extra:
        lines += ["## Other test metrics (chosen settings)", "", "| variant | " + " | ".join(extra) + " |",
                  "|---" * (len(extra) + 1) + "|"]
        for v in variants:
            runs = groups[(v, chosen[v])]
            lines.append(f"| {v} | " + " | ".join(_cell([r["summary"]["test"][k] for r in runs], k) for k in extra) + " |")
        lines.append("")

    # slice name -> its values, in order, over every finished run
    slice_values = {name: sorted({k for r in done for k in r["summary"]["test"]["slices"].get(name, {})}, key=_sort_key)
                    for name in sorted({n for r in done for n in r["summary"]["test"].get("slices", {})})}
    slice_names = list(slice_values)
    for name, values in slice_values.items():
        lines += [f"## Test accuracy per `{name}` (chosen settings)", "",
                  "| " + name + " | " + " | ".join(variants) + " |", "|---" * (len(variants) + 1) + "|"]
        for value in values:
            cells = [_slice_cell(groups[(v, chosen[v])], name, value) for v in variants]
            lines.append(f"| {value} | " + " | ".join(cells) + " |")
        lines.append("")

    # Small slices (old and new facts, balanced or not) per setting: there the setting is the question.
    if len(groups) > len(variants):
        for name, values in slice_values.items():
            if len(values) > 4:
                continue
            lines += [f"## Test accuracy per `{name}`, every setting", "",
                      "| variant | setting | " + " | ".join(f"{name}={v}" for v in values) + " |",
                      "|---" * (len(values) + 2) + "|"]
            for (v, point), runs in grid_order(groups, listed, sw["grid"]):
                lines.append(f"| {v} | `{point}` | " + " | ".join(_slice_cell(runs, name, value) for value in values)
                             + " |")
            lines.append("")

    lines += ["## The whole grid", "",
              f"| variant | setting | seeds | validation {metric} | test accuracy | trainable params | chosen |",
              "|---|---|---|---|---|---|---|"]
    for (v, point), runs in grid_order(groups, listed, sw["grid"]):
        lines.append(f"| {v} | `{point}` | {len(runs)} | {_cell([r['summary']['validation'][metric] for r in runs], metric)} | "
                     f"{_test_accuracy([r['summary'] for r in runs])} | "
                     f"{runs[0]['summary']['parameters']['trainable']:,} | {'yes' if chosen.get(v) == point else ''} |")
    lines.append("")

    figures = []
    if slice_names:
        _plot_slices(sweep_dir / "slices.png", slice_names, variants, groups, chosen)
        figures.append(("Test accuracy per slice, chosen settings (error bars: 95% interval)", "slices.png"))
    if _plot_curves(sweep_dir, sweep_dir / "curves.png", variants, groups, chosen):
        figures.append(("Validation accuracy during training, chosen settings (mean over seeds, band: min to max)",
                        "curves.png"))
    if _plot_induction(sweep_dir, sweep_dir / "induction.png", variants, groups, chosen):
        figures.append(("Strongest induction head (max over layers and heads) during training, chosen settings "
                        "(mean over seeds, band: min to max)", "induction.png"))
    caption = plot_budget(sweep_dir, sweep_dir / "budget.png", sw["grid"], variants, groups, metric, papers)
    if caption:
        figures.append((caption, "budget.png"))
    lines += ["## Figures", ""] + [f"{title}:\n\n![{file}]({file})\n" for title, file in figures]
    commands_file = sweep_dir / "commands.txt"
    commands = list(dict.fromkeys(commands_file.read_text().splitlines())) if commands_file.exists() else []
    lines += ["## Reproduce", "", "```", *commands, f"modformer report {sweep_dir}", "```", ""]
    path = sweep_dir / "report.md"
    atomic_write_text(path, "\n".join(lines))
    return path


def _beyond_grid(done: list[dict[str, Any]], grid: dict[str, list]) -> dict[tuple[str, Any], list[str]]:
    """(grid key, value) -> the variants with finished runs at a value the saved grid does not
    list (a sweep grown by a command whose grid the saved sweep.yaml does not record)."""
    found: dict[tuple[str, str], list[str]] = {}
    for r in done:
        for key, value in (r.get("point") or {}).items():
            if value not in grid.get(key, []):
                variants = found.setdefault((key, json.dumps(value)), [])
                if r["variant"] not in variants:
                    variants.append(r["variant"])
    return {(k, json.loads(v)): vs for (k, v), vs in sorted(found.items(), key=lambda item: _sort_key(item[0][1]))}


def _seeds_text(done: list[dict[str, Any]], variants: list[str]) -> str:
    """The seeds the finished runs hold, in order: '[0, 1, 2]', or each variant's where they
    differ ('standard [0, 1, 2]; mixit [0, 1, 2, 3, 4, 5, 6, 7]'), not the last command's."""
    seeds = {v: sorted({r["seed"] for r in done if r["variant"] == v and "seed" in r}) for v in variants}
    seeds = {v: s for v, s in seeds.items() if s}
    if len({tuple(s) for s in seeds.values()}) <= 1:
        return str(next(iter(seeds.values()), []))
    return "; ".join(f"{v} {s}" for v, s in seeds.items())


def summary_sections(report: str) -> str:
    """The parts of a report worth printing on a terminal: the chosen setting per variant
    and the per-slice tables (Markdown tables read well as plain text)."""
    keep, out = False, []
    for line in report.splitlines():
        if line.startswith("## "):
            keep = line.startswith(("## Chosen setting", "## Test accuracy per", *PRINTED))
        if keep:
            out.append(line)
    return "\n".join(out).strip()


def _slice_accuracies(runs: list[dict], name: str, value: str) -> list[float]:
    """Test accuracy on slice name=value of each run that has that slice value."""
    return [r["summary"]["test"]["slices"][name][value]["accuracy"] for r in runs
            if value in r["summary"]["test"]["slices"].get(name, {})]


def _slice_cell(runs: list[dict], name: str, value: str) -> str:
    accs = _slice_accuracies(runs, name, value)
    return _cell(accs) if accs else "-"


def _sort_key(value: str):
    return (0, float(value)) if value.lstrip("-").replace(".", "", 1).isdigit() else (1, value)


def _legend(variant: str, chosen: dict[str, str]) -> str:
    """A variant's label in a plot: its name, and the setting chosen for it where there was a
    choice, so that no setting hides behind the name ('frozen_qk (model.layers={-1: standard})')."""
    return variant if chosen[variant] == "default" else f"{variant} ({chosen[variant]})"


def _plot_slices(path: Path, names: list[str], variants: list[str], groups, chosen) -> None:
    fig, axes = plt.subplots(1, len(names), figsize=(6 * len(names), 4), squeeze=False)
    for ax, name in zip(axes[0], names):
        for v in variants:
            runs = groups[(v, chosen[v])]
            keys = sorted({k for r in runs for k in r["summary"]["test"]["slices"].get(name, {})}, key=_sort_key)
            stats = [summarize(_slice_accuracies(runs, name, k)) for k in keys]
            below = [0.0 if s.n < 2 else s.mean - max(s.low, 0.0) for s in stats]
            above = [0.0 if s.n < 2 else min(s.high, 1.0) - s.mean for s in stats]
            ax.errorbar(keys, [s.mean for s in stats], yerr=[below, above], marker="o", capsize=3,
                        label=_legend(v, chosen))
        ax.set(xlabel=name, ylabel="test accuracy", ylim=(-0.02, 1.02))
        ax.grid(alpha=0.3)
        ax.legend()
    fig.tight_layout()
    save_figure(fig, path)


def _curves(sweep_dir: Path, runs: list[dict], value) -> dict[int, list[float]]:
    """step -> one value per seed, from each run's metrics (steps every run logged)."""
    curves = []
    for r in runs:
        metrics = sweep_dir / r["run_dir"] / "metrics.jsonl"
        if metrics.exists():
            curves.append({e["step"]: v for e in read_records(metrics) if (v := value(e)) is not None})
    steps = sorted(set.intersection(*(set(c) for c in curves))) if curves else []
    return {s: [c[s] for c in curves] for s in steps}


def _plot_over_steps(sweep_dir: Path, path: Path, variants: list[str], groups, chosen, value, ylabel: str) -> bool:
    fig, ax = plt.subplots(figsize=(7, 4))
    drawn = False
    for v in variants:
        curve = _curves(sweep_dir, groups[(v, chosen[v])], value)
        if curve:
            steps, values = list(curve), list(curve.values())
            ax.plot(steps, [sum(x) / len(x) for x in values], marker="o", label=_legend(v, chosen))
            ax.fill_between(steps, [min(x) for x in values], [max(x) for x in values], alpha=0.2)
            drawn = True
    if not drawn:
        plt.close(fig)
        return False
    ax.set(xlabel="step", ylabel=ylabel, ylim=(-0.02, 1.02))
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    save_figure(fig, path)
    return True


def _plot_curves(sweep_dir: Path, path: Path, variants: list[str], groups, chosen) -> bool:
    def accuracy(e):
        return e.get("accuracy") if e.get("kind") == "eval" and e.get("split") == "validation" else None

    return _plot_over_steps(sweep_dir, path, variants, groups, chosen, accuracy, "validation accuracy")


def _plot_induction(sweep_dir: Path, path: Path, variants: list[str], groups, chosen) -> bool:
    def strongest(e):
        return max(max(row) for row in e["scores"]) if e.get("kind") == "induction" else None

    return _plot_over_steps(sweep_dir, path, variants, groups, chosen, strongest, "strongest induction score")

