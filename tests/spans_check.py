"""Checks shared by the telemetry tests."""

from __future__ import annotations


def uncovered_ms(intervals: list[tuple[float, float]], a: float, b: float) -> float:
    """ms of [a, b] that none of ``intervals`` (start, end) covers."""
    gaps, t = 0.0, a
    for s, e in sorted(intervals):
        if s > t:
            gaps += min(s, b) - t
        t = max(t, e)
        if t >= b:
            break
    return gaps + max(0.0, b - t)
