"""The evaluation harness: scripted callers, concurrency sweeps, the run store and reports.

Remote targets (agents reached over a socket) are in :mod:`rejoinder.harness.remote`.

Public names (the CLI is in :mod:`rejoinder.harness.cli`)::

    load_suite, scenario_hash          suites of scenario YAML files
    evaluate, Verdict                  task success of one call
    BenchOptions, run_bench            concurrency sweeps against one agent process
    RunStore, StoreError               the SQLite (WAL + FTS5) run store
    run_summary, compare_runs          per-level summaries; run-vs-run comparison
    write_report                       the self-contained HTML report
    percentiles, bootstrap_median_diff statistics
"""

from importlib import import_module
from typing import Any

_EXPORTS = {"BenchOptions": "bench", "run_bench": "bench", "compare_runs": "compare", "Verdict": "expect",
            "evaluate": "expect", "write_report": "report", "bootstrap_median_diff": "stats",
            "percentiles": "stats", "RunStore": "store", "StoreError": "store", "load_suite": "suite",
            "scenario_hash": "suite", "run_summary": "summary"}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:  # lazy: `rejoinder --help` must not import plotly and the models
    if name in _EXPORTS:
        return getattr(import_module(f".{_EXPORTS[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
