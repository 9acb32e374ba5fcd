"""Verdicts computed from the records: the word a results page writes for a claim, by the rule
the page states, with the rule's parameters declared in the sweep file.

A verdict is a quote (modformer/sweep/quote.py) whose last word is `verdict=RULE`; it names
the claim's setting as any quote does, then, for a rule that compares, `minus` (a paired
difference) or `vs` (a reference that must succeed at the same setting):

    <!--q retrieval_budget frozen_qk train.steps=3200 test.accuracy verdict=solves vs standard-->does not<!--/q-->
    <!--q lm knowledge train.lr=0.001 test.loss verdict=equal minus standard-->no order at this budget<!--/q-->

Rules (`RULES`), each reading its parameters from the sweep's `sweep.verdict` section
(`VerdictConfig`: declared in the sweep file, recorded in the folder's sweep.yaml and plan):

- `solves`: the claim that the setting solves the task; a seed solves it where its metric
  exceeds `threshold`. **agrees**: every seed does. **unconverged**: a seed of the `vs`
  reference does not (the budget, not the variant, may be why). **does not**: no seed does
  (and, with `vs`, every reference seed does). Seeds split: the success rate, `k of n seeds
  (p% [lo, hi])`, with its 95% Wilson interval. Where the sweep declares `span`, a failure
  counts only over a budget curve (`over AXIS`: the grid axis of budgets, the verdict read
  at its largest value): **does not** where no seed solves it at any budget, the budgets
  span at least `span` (16: largest / smallest) and the mean moved by at most `flat` between
  the last two; otherwise **unconverged** (no curve, too short a one, or one still moving).
- `fails`: the claim that it fails: **agrees** where no seed exceeds `threshold`, **does
  not** where every seed does, the success rate where they split.
- `below`, `above` (with `minus`): the claim that the difference, paired by seed, is below
  (above) 0: **agrees** where its 95% t interval lies on the claim's side of 0, **does not**
  where it lies on the other, **no order at this budget** where it includes 0.
- `equal` (with `minus`): **agrees** where the interval includes 0 and lies within
  +-`margin` (the largest difference that counts as none, in the metric's own scale),
  **does not** where it excludes 0, **no order at this budget** where it includes 0 but
  reaches past the margin. Where the sweep declares `span`, a difference against the claim
  of `below`, `above` or `equal` at one budget is **unconverged** (no curve shows it holds).
- `near=VALUE`: the claim that the metric is about VALUE (a paper's figure, in the metric's
  own scale: `verdict=near=0.486` for "about 48.6%"): **agrees** where the 95% t interval
  lies within VALUE +-`margin`, **does not** where it lies wholly outside (**unconverged**
  where the sweep declares `span`: one budget does not show where training ends), **no order
  at this budget** where it straddles an edge.

A benchmark's figure is one measurement (no seeds, no interval); its verdict
(`measured_verdict`) is `above` or `below` a threshold the quote itself declares, since a
benchmark has no sweep file: **agrees** where the figure lies on the claim's side of it,
**does not** where it does not.

A typed word that differs from the computed one fails `modformer quote --check`, as any
quoted figure does.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..configtools import option
from ..errors import ModformerError
from ..stats import rate_interval, summarize

AGREES, DOES_NOT, NO_ORDER, UNCONVERGED = "agrees", "does not", "no order at this budget", "unconverged"


@dataclass
class VerdictConfig:
    """`sweep.verdict`: the parameters of the verdict rules (modformer/sweep/verdict.py), part of
    the sweep's plan (fixed before the runs; a later change is an amendment)."""

    threshold: float | None = option(
        None, "a seed succeeds where its metric exceeds this, in the metric's own scale (0.9: 90% accuracy); read "
              "by the rules solves and fails; null: no success rule")
    margin: float | None = option(
        None, "the largest paired difference that counts as none, in the metric's own scale; read by the rule equal "
              "(an interval within +-margin agrees with a claim of equality); null: equality is never claimed")

    span: float | None = option(
        None, "where set, a claim fails ('does not') only over a budget curve whose largest budget is at least this "
              "many times its smallest (16: the random-attention page's 16x), flat at its end (see flat); a failure "
              "without one is 'unconverged'; null: one budget decides")
    flat: float | None = option(None, "the largest change of the mean between a curve's last two budgets that counts "
                                      "as flat, in the metric's own scale (read with span); null: any change")

    def __post_init__(self) -> None:
        if self.margin is not None and not self.margin > 0:
            raise ValueError(f"margin must be positive, got {self.margin}")
        if self.span is not None and not self.span >= 1:
            raise ValueError(f"span must be at least 1, got {self.span}")


RULES = ("solves", "fails", "below", "above", "equal", "near")
COMPARING = ("below", "above", "equal")  # rules of a paired difference (`minus`)
MEASURED = ("above", "below")  # the rules of one measurement (`measured_verdict`)


def _parameter(params: VerdictConfig, name: str, rule: str, where: str) -> float:
    value = getattr(params, name)
    if value is None:
        raise ModformerError(f"verdict={rule} reads sweep.verdict.{name}, which {where} does not declare: declare it "
                             f"in the sweep file (modformer sweep ... sweep.verdict.{name}=VALUE --plan-only)")
    return value


def success_rate(values: list[float], threshold: float) -> str:
    """'2 of 3 seeds (67% [21, 94])': the seeds past the threshold, with the 95% Wilson interval."""
    k = sum(v > threshold for v in values)
    low, high = rate_interval(k, len(values))
    return f"{k} of {len(values)} seeds ({100 * k / len(values):.0f}% [{100 * low:.0f}, {100 * high:.0f}])"


def verdict(rule: str, values: list[float], params: VerdictConfig, where: str,
            reference: list[float] | None = None, curve: list[tuple[float, list[float]]] | None = None,
            target: float | None = None) -> str:
    """The verdict word of `rule` on one setting's per-seed values (or, for a comparing rule,
    its per-seed differences), by the parameters `params` of the sweep `where` names.

    Args:
        rule: one of `RULES`.
        values: the metric per seed (a comparing rule: the paired differences per seed).
        params: the sweep's `sweep.verdict`.
        where: the sweep folder, named in errors.
        reference: `solves` only: the `vs` reference's values per seed at the same setting.
        curve: `solves` only: (budget, values per seed) at every budget of the curve, in
            increasing budget, `values` being the last's; None: no curve.
        target: `near` only: the value the claim says the metric is about.

    Returns:
        agrees, does not, no order at this budget, unconverged, or a success rate.
    """
    if rule in ("solves", "fails"):
        threshold = _parameter(params, "threshold", rule, where)
        solved = [v > threshold for v in values]
        if rule == "solves" and reference is not None and not all(r > threshold for r in reference):
            return UNCONVERGED
        if all(solved) or not any(solved):
            if all(solved) == (rule == "solves"):
                return AGREES
            # a setting that solves the task where the claim is that it fails: more budget would not undo it
            flat = rule == "fails" or params.span is None or _flat_failure(curve, threshold, params)
            return DOES_NOT if flat else UNCONVERGED
        return success_rate(values, threshold)
    low, high = summarize(values).interval(None)
    if rule == "near":
        if target is None:
            raise ModformerError("verdict=near names the value the claim says the metric is about: near=VALUE")
        margin = _parameter(params, "margin", rule, where)
        if target - margin <= low and high <= target + margin:
            return AGREES
        outside = high < target - margin or low > target + margin
        return (DOES_NOT if params.span is None else UNCONVERGED) if outside else NO_ORDER
    if rule == "equal":
        margin = _parameter(params, "margin", rule, where)
        if low > 0 or high < 0:
            return DOES_NOT if params.span is None else UNCONVERGED
        return AGREES if -margin <= low and high <= margin else NO_ORDER
    claim_side = high < 0 if rule == "below" else low > 0
    other_side = low > 0 if rule == "below" else high < 0
    return AGREES if claim_side else (DOES_NOT if params.span is None else UNCONVERGED) if other_side else NO_ORDER


def measured_verdict(rule: str, value: float, threshold: float) -> str:
    """The verdict of one measurement (a benchmark's figure): agrees where `value` lies on the
    claim's side of `threshold` (`above`: past it; `below`: short of it), does not elsewhere."""
    if rule not in MEASURED:
        raise ModformerError(f"verdict={rule}: one measurement is judged above or below a threshold only")
    return AGREES if (value > threshold if rule == "above" else value < threshold) else DOES_NOT


def _flat_failure(curve: list[tuple[float, list[float]]] | None, threshold: float, params: VerdictConfig) -> bool:
    """Whether a failure holds over a budget curve: no seed past the threshold at any budget,
    the budgets spanning `span`, the mean flat (`flat`) between the last two."""
    if not curve or len(curve) < 2 or curve[0][0] <= 0 or curve[-1][0] / curve[0][0] < params.span:
        return False
    if any(v > threshold for _, values in curve for v in values):
        return False
    means = [sum(values) / len(values) for _, values in curve[-2:]]
    return params.flat is None or abs(means[1] - means[0]) <= params.flat
