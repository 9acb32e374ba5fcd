"""modformer.stats against scipy.stats: each interval is computed again here, independently of
how stats.py computes it, for the numbers of seeds the results use (2 and 3) and beyond
(8, and 40, past the 30 degrees of freedom of the t table stats.py used to keep)."""

import math

import numpy as np
import pytest
from scipy import stats as scipy_stats

from modformer.stats import Summary, metric_bounds, rate_interval, summarize, t95

SEEDS = [2, 3, 8, 40]


def values(n: int, seed: int = 0) -> np.ndarray:
    """n skewed values in [0, 1], like accuracies over seeds."""
    return np.random.default_rng(seed).beta(5.0, 2.0, size=n)


def test_t95_is_students_quantile():
    # The textbook values: 12.706 for 1 degree of freedom, 4.303 for 2, 2.021 for 40; the normal's 1.960 in the limit.
    assert [round(t95(dof), 3) for dof in (1, 2, 40)] == [12.706, 4.303, 2.021]
    assert abs(t95(10**9) - scipy_stats.norm.ppf(0.975)) < 1e-6
    for dof in range(1, 101):
        assert t95(dof) == pytest.approx(scipy_stats.t.interval(0.95, dof)[1], rel=1e-12)


@pytest.mark.parametrize("n", SEEDS)
def test_the_interval_over_seeds_is_scipys_t_interval(n):
    x = values(n)
    s = summarize(list(x))
    assert s.n == n and s.mean == pytest.approx(x.mean(), rel=1e-12) and s.std == pytest.approx(x.std(ddof=1), rel=1e-12)
    low, high = scipy_stats.t.interval(0.95, n - 1, loc=x.mean(), scale=scipy_stats.sem(x))
    assert (s.low, s.high) == (pytest.approx(low, rel=1e-12), pytest.approx(high, rel=1e-12))
    ci = scipy_stats.ttest_1samp(x, 0.0).confidence_interval(0.95)
    assert (s.low, s.high) == (pytest.approx(ci.low, rel=1e-12), pytest.approx(ci.high, rel=1e-12))


@pytest.mark.parametrize("n", SEEDS)
def test_a_difference_paired_by_seed_has_scipys_paired_t_interval(n):
    """quote's `minus` and the LLM-Modules report summarize the per-seed differences; their
    interval is the paired t-test's."""
    a, b = values(n, seed=1), values(n, seed=2)
    s = summarize(list(a - b))
    ci = scipy_stats.ttest_rel(a, b).confidence_interval(0.95)
    assert (s.low, s.high) == (pytest.approx(ci.low, rel=1e-9), pytest.approx(ci.high, rel=1e-9))


def test_one_value_has_no_interval_and_equal_values_a_zero_width_one():
    one = summarize([0.5])
    assert one.n == 1 and one.std == 0.0 and math.isnan(one.half_width) and one.format() == "0.5000 (n=1)"
    same = summarize([0.25, 0.25, 0.25])
    assert (same.low, same.high) == (0.25, 0.25)


def test_an_interval_is_clipped_to_the_metrics_range_where_asked():
    # Seeds that disagree near a bound: the symmetric t interval passes 1; clipped, it does not.
    near_one = summarize([1.0, 1.0, 0.9])
    assert near_one.high > 1.0
    assert near_one.format(bounds=(0.0, 1.0)).endswith(", 1.0000]")
    assert near_one.format(bounds=(0.0, 1.0)).startswith(near_one.format().split("[")[0])


@pytest.mark.parametrize("k, n", [(0, 1), (1, 1), (0, 3), (1, 3), (3, 3), (0, 8), (4, 8), (7, 8), (8, 8),
                                  (0, 40), (13, 40), (40, 40)])
def test_a_success_rate_has_the_wilson_interval(k, n):
    """Wilson's score interval written out, with the normal's quantile from scipy."""
    z = scipy_stats.norm.ppf(0.975)
    p = k / n
    centre = (k + z * z / 2) / (n + z * z)
    half = z * math.sqrt(n * p * (1 - p) + z * z / 4) / (n + z * z)
    low, high = rate_interval(k, n)
    assert (low, high) == (pytest.approx(centre - half, abs=1e-12), pytest.approx(centre + half, abs=1e-12))
    # No seed or every seed: the interval reaches 0 or 1 exactly, and never past.
    assert 0.0 <= low <= p <= high <= 1.0
    assert (low == 0.0) == (k == 0) and (high == 1.0) == (k == n)


@pytest.mark.parametrize("k, n", [(0, 0), (-1, 3), (4, 3)])
def test_a_rate_needs_a_count_within_its_trials(k, n):
    with pytest.raises(ValueError, match="0 <= successes <= n"):
        rate_interval(k, n)


@pytest.mark.parametrize("metric, bounds", [("accuracy", (0.0, 1.0)), ("token_accuracy", (0.0, 1.0)),
                                            ("held_out_exact", (0.0, 1.0)), ("loss", (0.0, math.inf)),
                                            ("perplexity", None), ("fit_error", None)])
def test_a_metrics_range_comes_from_its_name(metric, bounds):
    assert metric_bounds(metric) == bounds


def test_an_interval_is_clipped_to_the_metrics_range_on_each_side_alone():
    inside = Summary(3, 0.5, 0.05, 0.1)
    assert inside.interval((0.0, 1.0)) == pytest.approx((0.4, 0.6))  # nothing to clip
    assert Summary(3, 0.05, 0.1, 0.2).interval((0.0, 1.0)) == pytest.approx((0.0, 0.25))
    assert Summary(3, 0.95, 0.1, 0.2).interval((0.0, 1.0)) == pytest.approx((0.75, 1.0))
    assert inside.interval() == pytest.approx((0.4, 0.6))


def test_two_values_have_an_interval_and_one_value_says_so():
    assert summarize([0.4, 0.6]).format(2) == f"0.50 ± 0.14 [{0.5 - t95(1) * 0.1:.2f}, {0.5 + t95(1) * 0.1:.2f}]"
    assert summarize([0.4]).format(2) == "0.40 (n=1)"
    with pytest.raises(ValueError, match="^no values to summarize$"):
        summarize([])
