"""Merging the callers' figures from several Ray workers: exact, from raw samples (no Ray needed)."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from rejoinder.errors import MissingExtra
from rejoinder.harness.ray_load import assign, merge_level_stats
from rejoinder.harness.store import SQLiteStore
from rejoinder.harness.summary import run_summary


def part(worker: int, lags: list[float], cpu: float, wall: float, calls=()) -> dict:
    return {"worker": worker, "host": "h", "pid": 100 + worker, "callers": len(calls), "calls": list(calls),
            "lags_ms": lags, "caller_cpu_s": [0.01] * len(calls),
            "stats": {"wall_s": wall, "cpu_s": cpu, "cpu_pct": 100 * cpu / wall, "machine_busy_pct": 50.0,
                      "rss_start_mb": 100.0, "rss_peak_mb": 120.0 + worker, "loop_lag_ms": {"p99": max(lags)}}}


def test_loop_lag_percentiles_come_from_the_pooled_samples_not_averaged():
    fast = [1.0] * 990 + [2.0] * 10   # p99 ≈ 1.99
    slow = [50.0] * 100               # p99 = 50
    merged = merge_level_stats([part(0, fast, 3.0, 10.0), part(1, slow, 1.0, 12.0)], cores=2)
    pooled = np.asarray(fast + slow)
    for q in (50, 90, 95, 99):
        assert merged["loop_lag_ms"][f"p{q}"] == round(float(np.percentile(pooled, q)), 3)
    assert merged["loop_lag_ms"]["p99"] == 50.0 != round((1.99 + 50.0) / 2, 3)  # the average would lie
    assert merged["loop_lag_ms"]["max"] == 50.0
    assert merged["cpu_s"] == 4.0 and merged["wall_s"] == 12.0 and merged["cpu_pct"] == round(400 / 12, 1)
    assert merged["rss_peak_mb"] == 241.0 and [w["worker"] for w in merged["workers"]] == [0, 1]


def test_callers_are_dealt_round_robin_like_one_process():
    assert assign(5, 2) == [[0, 2, 4], [1, 3]]
    assert assign(2, 4) == [[0], [1], [], []]
    assert sorted(w for share in assign(2003, 4) for w in share) == list(range(2003))


def test_a_run_merged_from_workers_has_the_percentiles_of_all_its_turns(tmp_path):
    """The store keeps every turn's raw V2V; a run written by 4 workers summarises the pooled
    sample exactly, whatever each worker's own distribution."""
    rng = np.random.default_rng(7)
    store = SQLiteStore(tmp_path / "runs.sqlite")
    run_id = store.begin_run({"concurrency": [40]}, suite="t")
    everything = []
    for w in range(4):
        v2v = rng.lognormal(6.0 + 0.3 * w, 0.4, 30)  # each worker its own distribution
        everything += list(np.round(v2v, 3))
        for k, x in enumerate(np.round(v2v, 3)):
            store.add_call(run_id, {"id": f"{w}-{k}", "scenario": "s", "concurrency": 40, "worker": w,
                                    "success": True, "checks": 1},
                           [{"turn_id": 1, "status": "completed", "v2v_ms": float(x),
                             "segments": {"endpointing": float(x)}, "boundaries": {}, "stalls": []}])
    lv = run_summary(store, run_id)["levels"][0]
    for q in (50, 90, 95, 99):
        assert lv["v2v_ms"][f"p{q}"] == round(float(np.percentile(everything, q)), 3)
    store.close()


def test_without_ray_installed_the_error_names_the_extra(monkeypatch):
    from rejoinder.harness import ray_cluster
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray → ImportError
    with pytest.raises(MissingExtra, match=r"pip install 'rejoinder\[ray\]'"):
        ray_cluster.require_ray()
