"""Statistics for latency distributions: percentiles, ECDFs and bootstrap intervals.

Latencies are heavy-tailed and small-sample; the harness therefore reports order statistics
(p50/p90/p95/p99) rather than means, and compares runs with a percentile bootstrap of the
difference of medians rather than a t-test. Everything is deterministic given ``seed``.

Percentiles use linear interpolation between order statistics (NumPy's default, "type 7"), so
``percentiles([0, 1, …, 100])["p90"] == 90`` exactly. An empty sample gives ``None`` values, never
an exception: a level where no turn was answered must still produce a row.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Sequence

import numpy as np

QUANTILES = (50, 90, 95, 99)


def _clean(values: Iterable[float | None]) -> np.ndarray:
    arr = np.asarray([v for v in values if v is not None], dtype=np.float64)
    return arr[np.isfinite(arr)]


def percentiles(values: Iterable[float | None], qs: Sequence[float] = QUANTILES) -> dict[str, float | None]:
    """``{"p50": …, "p90": …}`` of ``values`` (``None`` entries and NaNs ignored), rounded to the
    microsecond; ``None`` when empty."""
    arr = _clean(values)
    if arr.size == 0:
        return {f"p{q:g}": None for q in qs}
    got = np.percentile(arr, list(qs))
    return {f"p{q:g}": round(float(v), 3) for q, v in zip(qs, got)}


def describe(values: Iterable[float | None]) -> dict[str, float | int | None]:
    """Percentiles plus ``n``, ``mean``, ``min`` and ``max``."""
    arr = _clean(values)
    out: dict[str, float | int | None] = {"n": int(arr.size)}
    out.update(percentiles(arr))
    if arr.size:
        out.update(mean=round(float(arr.mean()), 3), min=round(float(arr.min()), 3),
                   max=round(float(arr.max()), 3))
    else:
        out.update(mean=None, min=None, max=None)
    return out


def ecdf(values: Iterable[float | None]) -> tuple[list[float], list[float]]:
    """Empirical CDF as step points: sorted values and the fraction ≤ each."""
    arr = np.sort(_clean(values))
    if arr.size == 0:
        return [], []
    return arr.tolist(), (np.arange(1, arr.size + 1) / arr.size).tolist()


@dataclass(frozen=True)
class Difference:
    """``b`` minus ``a``: the difference of medians with a bootstrap confidence interval."""

    median_a: float | None
    median_b: float | None
    diff: float | None
    low: float | None
    high: float | None
    n_a: int
    n_b: int
    level: float

    @property
    def excludes_zero(self) -> bool:
        return self.low is not None and self.high is not None and (self.low > 0 or self.high < 0)


def bootstrap_median_diff(a: Iterable[float | None], b: Iterable[float | None], *, level: float = 0.95,
                          reps: int = 4000, seed: int = 0) -> Difference:
    """Percentile-bootstrap interval for ``median(b) - median(a)`` (independent samples).

    Each replicate resamples both samples with replacement. With fewer than 2 values on a side the
    interval is ``None`` (nothing can be said). Deterministic for a given ``seed``.
    """
    xa, xb = _clean(a), _clean(b)
    med_a = float(np.median(xa)) if xa.size else None
    med_b = float(np.median(xb)) if xb.size else None
    diff = med_b - med_a if med_a is not None and med_b is not None else None
    if xa.size < 2 or xb.size < 2:
        return Difference(med_a, med_b, diff, None, None, int(xa.size), int(xb.size), level)
    rng = np.random.default_rng(seed)
    reps_a = np.median(xa[rng.integers(0, xa.size, (reps, xa.size))], axis=1)
    reps_b = np.median(xb[rng.integers(0, xb.size, (reps, xb.size))], axis=1)
    alpha = (1.0 - level) / 2.0
    low, high = np.quantile(reps_b - reps_a, [alpha, 1.0 - alpha])
    return Difference(med_a, med_b, diff, round(float(low), 3), round(float(high), 3),
                      int(xa.size), int(xb.size), level)


def bootstrap_percentile_ci(values: Iterable[float | None], q: float = 50, *, level: float = 0.95,
                            reps: int = 4000, seed: int = 0) -> tuple[float | None, float | None]:
    """Percentile-bootstrap interval for the ``q``-th percentile of one sample."""
    x = _clean(values)
    if x.size < 2:
        return None, None
    rng = np.random.default_rng(seed)
    reps_q = np.percentile(x[rng.integers(0, x.size, (reps, x.size))], q, axis=1)
    alpha = (1.0 - level) / 2.0
    low, high = np.quantile(reps_q, [alpha, 1.0 - alpha])
    return round(float(low), 3), round(float(high), 3)
