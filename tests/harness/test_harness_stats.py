"""Statistics against known distributions (fixed seeds)."""

from __future__ import annotations

from statistics import NormalDist

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rejoinder.harness.stats import bootstrap_median_diff, bootstrap_percentile_ci, describe, ecdf, percentiles


def test_percentiles_of_0_to_100_are_exact():
    assert percentiles(range(101)) == {"p50": 50.0, "p90": 90.0, "p95": 95.0, "p99": 99.0}


def test_percentiles_interpolate_linearly():
    assert percentiles([10, 20], qs=(50, 90)) == {"p50": 15.0, "p90": 19.0}


def test_empty_and_missing_values():
    assert percentiles([]) == {"p50": None, "p90": None, "p95": None, "p99": None}
    assert percentiles([None, float("nan"), 5.0])["p99"] == 5.0
    assert describe([])["n"] == 0 and describe([])["mean"] is None


@pytest.mark.parametrize("q", [50, 90, 95, 99])
def test_normal_sample_matches_theory(q):
    rng = np.random.default_rng(7)
    x = rng.normal(800.0, 120.0, 200_000)
    theory = NormalDist(800.0, 120.0).inv_cdf(q / 100)
    assert percentiles(x)[f"p{q}"] == pytest.approx(theory, abs=3.0)


@pytest.mark.parametrize("q", [50, 90, 95, 99])
def test_exponential_sample_matches_theory(q):
    rng = np.random.default_rng(11)
    x = rng.exponential(300.0, 200_000)  # heavy right tail, like queueing delay
    theory = -300.0 * np.log(1 - q / 100)
    assert percentiles(x)[f"p{q}"] == pytest.approx(theory, rel=0.02)


def test_ecdf_steps():
    xs, ys = ecdf([3, 1, 2, None])
    assert xs == [1, 2, 3] and ys == pytest.approx([1 / 3, 2 / 3, 1.0])
    assert ecdf([]) == ([], [])


def test_bootstrap_finds_a_known_shift():
    rng = np.random.default_rng(3)
    a = rng.normal(500, 60, 80)
    b = rng.normal(620, 60, 80)
    d = bootstrap_median_diff(a, b, seed=1)
    assert d.low < 120 < d.high and d.excludes_zero
    assert d.diff == pytest.approx(np.median(b) - np.median(a))


def test_bootstrap_is_deterministic_for_a_seed():
    rng = np.random.default_rng(4)
    a, b = rng.normal(0, 1, 30), rng.normal(0, 1, 30)
    assert bootstrap_median_diff(a, b, seed=5) == bootstrap_median_diff(a, b, seed=5)


def test_bootstrap_coverage_when_nothing_differs():
    """Same distribution on both sides: the 95 % interval contains 0 in about 95 % of samples."""
    rng = np.random.default_rng(2024)
    hits = 0
    trials = 300
    for i in range(trials):
        a, b = rng.exponential(200, 60), rng.exponential(200, 60)
        d = bootstrap_median_diff(a, b, reps=1000, seed=i)
        hits += not d.excludes_zero
    assert 0.89 <= hits / trials <= 0.99


def test_bootstrap_needs_two_values_per_side():
    d = bootstrap_median_diff([1.0], [2.0, 3.0])
    assert d.low is None and d.diff == 1.5 and not d.excludes_zero


def test_percentile_ci_contains_the_true_median():
    rng = np.random.default_rng(9)
    low, high = bootstrap_percentile_ci(rng.normal(100, 10, 400), 50, seed=0)
    assert low < 100 < high and high - low < 5


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(0, 1e5, allow_nan=False), min_size=1, max_size=60))
def test_percentiles_are_ordered_and_bounded(values):
    p = percentiles(values)
    tol = 5e-4  # values are rounded to the microsecond (3 decimals of a ms)
    assert min(values) - tol <= p["p50"] <= p["p90"] <= p["p95"] <= p["p99"] <= max(values) + tol
