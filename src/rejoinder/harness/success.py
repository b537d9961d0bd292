"""Task success per scenario: pass@1, pass^k and how sure we can be of them.

A scenario played ``n`` times with ``c`` calls meeting every expectation has

* ``pass@1 = c / n`` — the chance that one call succeeds;
* ``pass^k = C(c, k) / C(n, k)`` — the chance that ``k`` calls drawn from those ``n`` *all*
  succeed (the unbiased estimator of τ-bench, Yao et al. 2024, "τ-bench: A Benchmark for
  Tool-Agent-User Interaction", §3; with ``n == k`` it is 1 when every call passed, else 0). An
  agent that passes each call half the time has pass@1 0.5 but pass^3 0.125: reliability, not
  luck, is what a caller meets. ``None`` when ``n < k`` (too few calls to say).

``k`` is the run's ``--repeat`` (each worker plays every scenario ``repeat`` times per level, so at
N calls at once a scenario has ``n = N × repeat`` calls). Suite figures are the mean over
scenarios (each scenario weighs the same however often it ran), with a Wilson score 95 %
interval for pass@1 over the calls (Wilson 1927; calls of one scenario are not independent
trials, so read it as a lower bound on the uncertainty). ``n`` is always reported beside them.
"""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Any, Iterable

Z95 = 1.959963984540054  # two-sided 95 % normal quantile


def pass_hat_k(c: int, n: int, k: int) -> float | None:
    """``C(c, k) / C(n, k)``: the chance that ``k`` of ``n`` calls (``c`` passed) all pass.

    Raises:
        ValueError: ``k < 1`` or ``c`` outside ``0..n``.
    """
    if k < 1 or not 0 <= c <= n:
        raise ValueError(f"pass^k needs k ≥ 1 and 0 ≤ c ≤ n, got c={c}, n={n}, k={k}")
    if n < k:
        return None
    return math.comb(c, k) / math.comb(n, k)


def wilson(ok: int, n: int, z: float = Z95) -> tuple[float | None, float | None]:
    """Wilson score interval ``(low, high)`` of a proportion ``ok / n``; ``(None, None)`` for n = 0."""
    if n == 0:
        return None, None
    p = ok / n
    den = 1 + z * z / n
    mid = (p + z * z / (2 * n)) / den
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / den
    return round(max(0.0, mid - half), 3), round(min(1.0, mid + half), 3)


def scenario_success(calls: Iterable[dict[str, Any]], k: int) -> dict[str, dict[str, Any]]:
    """Per scenario name: ``ok``, ``n``, ``rate`` (= ``pass_at_1``), ``pass_k`` (pass^k), ``k``,
    ``causes`` (failed checks per cause, most frequent first) and ``failures`` (up to 5 distinct
    failed checks, sorted)."""
    by: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for c in calls:
        by[c["scenario"]].append(c)
    out: dict[str, dict[str, Any]] = {}
    for name, cs in sorted(by.items()):
        ok, n = sum(1 for c in cs if c["success"]), len(cs)
        causes: dict[str, int] = defaultdict(int)
        why: set[str] = set()
        for c in cs:
            fails = c.get("failures") or []
            cause_list = (c.get("extra") or {}).get("causes") or []
            for i, f in enumerate(fails):
                cause = cause_list[i] if i < len(cause_list) else "call failed" if c.get("error") else "?"
                causes[cause] += 1
                why.add(f)
        pk = pass_hat_k(ok, n, k)
        out[name] = {"ok": ok, "n": n, "rate": round(ok / n, 3), "pass_at_1": round(ok / n, 3),
                     "pass_k": None if pk is None else round(pk, 3), "k": k,
                     "causes": dict(sorted(causes.items(), key=lambda kv: -kv[1])),
                     "failures": sorted(why)[:5]}
    return out


def suite_success(per_scenario: dict[str, dict[str, Any]], k: int) -> dict[str, Any]:
    """Suite figures over :func:`scenario_success`: mean pass@1 and pass^k over scenarios, the
    Wilson 95 % interval of pass@1 over calls, and the counts they rest on."""
    rows = list(per_scenario.values())
    ok, n = sum(r["ok"] for r in rows), sum(r["n"] for r in rows)
    with_k = [pass_hat_k(r["ok"], r["n"], k) for r in rows]
    with_k = [x for x in with_k if x is not None]
    return {"k": k, "scenarios": len(rows), "calls": n, "calls_ok": ok,
            "calls_per_scenario": sorted({r["n"] for r in rows}),
            "pass_at_1": round(sum(r["ok"] / r["n"] for r in rows) / len(rows), 3) if rows else None,
            "pass_at_1_ci95": list(wilson(ok, n)),
            "pass_k": round(sum(with_k) / len(with_k), 3) if with_k and len(with_k) == len(rows) else None,
            "scenarios_all_passed": sum(1 for r in rows if r["ok"] == r["n"])}
