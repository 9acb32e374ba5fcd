"""Mean, standard deviation and a 95% confidence interval over seeds; the 95% Wilson interval
of a success rate. The quantiles and the interval come from scipy.stats, imported on first
use: it takes about 0.7 s to import, more than a command that quotes no interval should pay."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence


def t95(dof: int) -> float:
    """The two-sided 95% quantile of Student's t with `dof` degrees of freedom (4.30265 for 2)."""
    from scipy.stats import t

    return float(t.ppf(0.975, dof))


@dataclass(frozen=True)
class Summary:
    n: int
    mean: float
    std: float  # sample standard deviation (n - 1); 0 for one value
    half_width: float  # of the 95% t interval; nan for fewer than 2 values

    @property
    def low(self) -> float:
        return self.mean - self.half_width

    @property
    def high(self) -> float:
        return self.mean + self.half_width

    def interval(self, bounds: tuple[float, float] | None = None) -> tuple[float, float]:
        """The 95% interval, clipped to `bounds`, a metric's possible range (an accuracy's
        [0, 1]): the t interval is symmetric and can reach past it when seeds disagree."""
        return (self.low, self.high) if bounds is None else (max(self.low, bounds[0]), min(self.high, bounds[1]))

    def format(self, digits: int = 4, bounds: tuple[float, float] | None = None) -> str:
        """Mean ± std [interval clipped to `bounds`]."""
        if self.n < 2:
            return f"{self.mean:.{digits}f} (n=1)"
        low, high = self.interval(bounds)
        return f"{self.mean:.{digits}f} ± {self.std:.{digits}f} [{low:.{digits}f}, {high:.{digits}f}]"


def metric_bounds(metric: str) -> tuple[float, float] | None:
    """The possible range of a metric, by its name: [0, 1] for accuracies and exact-match
    rates (`held_out_exact`), >= 0 for losses, unbounded otherwise (Summary.format and the
    figures clip intervals to it)."""
    if "accuracy" in metric or "exact" in metric:
        return (0.0, 1.0)
    return (0.0, math.inf) if "loss" in metric else None


def summarize(values: Sequence[float]) -> Summary:
    n = len(values)
    if n == 0:
        raise ValueError("no values to summarize")
    mean = sum(values) / n
    if n == 1:
        return Summary(1, mean, 0.0, math.nan)
    std = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    return Summary(n, mean, std, t95(n - 1) * std / math.sqrt(n))


def rate_interval(successes: int, n: int) -> tuple[float, float]:
    """The 95% Wilson score interval of a rate of `successes` in `n` trials (seeds), from
    scipy.stats.binomtest: where outcomes are bimodal (a seed solves a task or it does not),
    the rate is the figure to report, and with few seeds the interval stays inside [0, 1] and
    wide, as it should."""
    if n < 1 or not 0 <= successes <= n:
        raise ValueError(f"a rate needs 0 <= successes <= n, n >= 1; got {successes} of {n}")
    from scipy.stats import binomtest

    ci = binomtest(successes, n).proportion_ci(confidence_level=0.95, method="wilson")
    return float(ci.low), float(ci.high)
