"""The report section: each arm against Standard at the same budget, seed by seed.

A sweep of this paper (`sweep.paper: decon_attention`) names its arms in a mapping, one of
them of `variant: standard` with no settings (the baseline). For every other arm the section
gives its test accuracy, the difference to Standard paired by seed with its 95% t interval,
the success rate (seeds at or above 90% test accuracy) with its Wilson interval, and a
verdict by the rule of results/random_attention/README.md read for one budget: "below
Standard" or "above Standard" where the paired interval excludes 0, "no order at this
budget" where it does not; where the arm's seeds split (some solve the task, some do not)
the success rate is the figure, and the verdict says so.
"""

from __future__ import annotations

from pathlib import Path

from modformer.stats import rate_interval, summarize
from modformer.sweep.kinds import saved_sweep

HEADING = "## Deconstructing Attention: each arm against Standard"
SOLVED = 0.9  # a seed solves the task at this test accuracy (results/random_attention/README.md)


def _baseline(arms: dict) -> str | None:
    """The arm that is Standard with no settings of its own."""
    for name, given in arms.items():
        given = given or {}
        if given.get("variant", name) == "standard" and set(given) <= {"variant"}:
            return name
    return None


def _placement(given: dict | None) -> str:
    """Where the arm departs from its variant in every layer: 'standard in layers 1, 3'."""
    layers = (given or {}).get("model.layers")
    if not layers:
        return "every layer"
    if isinstance(layers, list):
        return "layers " + ", ".join(str(x) for x in layers)
    where: dict[str, list[str]] = {}
    for index, entry in layers.items():
        where.setdefault(str(entry), []).append(str(index))
    return "; ".join(f"{entry} in layer{'s' if len(at) > 1 else ''} {', '.join(at)}" for entry, at in where.items())


def verdict(differences: list[float], accuracies: list[float]) -> str:
    """The verdict word of one arm against Standard, from its per-seed figures."""
    solved = sum(a >= SOLVED for a in accuracies)
    if 0 < solved < len(accuracies):
        return f"seeds split ({solved} of {len(accuracies)} solve it)"
    if len(differences) < 2:
        return "not decided (fewer than 2 paired seeds)"
    low, high = summarize(differences).interval()
    if high < 0:
        return "below Standard"
    if low > 0:
        return "above Standard"
    return "no order at this budget"


def section(sweep_dir: Path, variants: list[str], groups: dict, chosen: dict) -> list[str]:
    arms = saved_sweep(sweep_dir)["sweep"]["variants"]
    if not isinstance(arms, dict):
        return []
    base = _baseline(arms)
    if base is None or base not in chosen:
        return [HEADING, "", "No finished Standard arm (an arm of `variant: standard` without settings) to compare "
                "with.", ""]

    def by_seed(arm: str) -> dict[int, float]:
        return {r["seed"]: r["summary"]["test"]["accuracy"] for r in groups[(arm, chosen[arm])]}

    standard = by_seed(base)
    lines = [HEADING, "",
             f"Test accuracy at the setting chosen on validation; the difference to `{base}` paired by seed "
             f"(mean ± std [95% t interval]); solved: seeds at or above {SOLVED:.0%}, with the 95% Wilson "
             f"interval of the rate.", "",
             "| arm | variant | placement | test accuracy | minus Standard | solved | verdict |",
             "|---|---|---|---|---|---|---|"]
    for arm in variants:
        if arm == base:
            continue
        mine = by_seed(arm)
        seeds = sorted(set(mine) & set(standard))
        accuracies = [mine[s] for s in sorted(mine)]
        differences = [mine[s] - standard[s] for s in seeds]
        solved = sum(a >= SOLVED for a in accuracies)
        low, high = rate_interval(solved, len(accuracies))
        given = arms.get(arm) or {}
        lines.append(f"| {arm} | {given.get('variant', arm)} | {_placement(given)} | "
                     f"{summarize(accuracies).format(3, (0.0, 1.0))} | "
                     f"{summarize(differences).format(3) if differences else 'none paired'} | "
                     f"{solved} of {len(accuracies)} ({solved / len(accuracies):.0%} [{low:.0%}, {high:.0%}]) | "
                     f"{verdict(differences, accuracies)} |")
    return lines + [""]
