"""Benchmark: the concurrency sweep of the bundled suite on the embedded stack.

Runs every scenario of the suite at each concurrency level (N calls at once in this one agent
process, sharing the loaded models), stores the run, writes the HTML report, and prints per level
V2V p50/p95, the largest critical-path segment, task success, CPU, RSS and the simulated callers'
share of the CPU, then the capacity: the highest level whose V2V p95 stays within 1.5× the
single-call p95.

    .venv/bin/python bench/sweep.py [--levels 1,2,4] [--repeat 1] [--scenarios a,b] [--tts piper]
                                    [--store runs.sqlite] [--report sweep.html] [--json]

This is what ``rejoinder bench --concurrency 1,2,4`` does, plus the report and a terse printout.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys

from rejoinder.agent import Agent
from rejoinder.config import load_config
from rejoinder.harness import conditions
from rejoinder.harness.bench import BenchOptions, run_bench
from rejoinder.harness.report import write_report
from rejoinder.harness.store import RunStore
from rejoinder.harness.suite import load_suite, scenario_hash
from rejoinder.harness.summary import run_summary
from rejoinder.timeline import SEGMENTS


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--suite", default=None)
    ap.add_argument("--levels", default="1,2,4")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--scenarios", default=None)
    ap.add_argument("--tts", default=None)
    ap.add_argument("--store", default=None)
    ap.add_argument("--report", default=None)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    levels = [int(x) for x in args.levels.split(",")]
    label, scs = load_suite(args.suite, args.scenarios.split(",") if args.scenarios else None)
    cfg = load_config(None)
    if args.tts:
        cfg.stack.tts = args.tts
    hashes = {sc.name: scenario_hash(sc) for sc in scs}
    store = RunStore(args.store)
    run_id = store.begin_run(conditions.collect(cfg, concurrency=levels, scenarios=hashes, repeat=args.repeat,
                                                suite=label), suite=label, command=" ".join(sys.argv))
    done = [0]
    total = sum(levels) * len(scs) * args.repeat

    def on_call(rec):
        done[0] += 1
        print(f"[{done[0]}/{total}] {rec['concurrency']} at once · {rec['scenario']}: "
              f"{'ok' if rec['success'] else 'FAILED ' + '; '.join(rec['failures'])}", file=sys.stderr)

    opts = BenchOptions(levels=levels, repeat=args.repeat, hashes=hashes, on_call=on_call,
                        artifacts=store.path.parent / "artifacts")
    asyncio.run(run_bench(Agent(cfg), scs, store, run_id, opts))
    summary = run_summary(store, run_id)
    report = write_report(store, run_id, args.report)
    if args.json:
        print(json.dumps(summary, indent=2, default=str))
        return 0
    print(f"run {run_id} · suite {label} · store {store.path} · report {report}")
    print(f"{'N':>3} {'turns':>5} {'V2V p50':>8} {'p95':>6} {'p99':>6}  {'largest':<13} {'tasks':>5} "
          f"{'CPU%':>5} {'busy%':>5} {'RSS MB':>7} {'callers':>8} {'lag p99':>7}")
    for lv in summary["levels"]:
        v, r = lv["v2v_ms"], lv.get("resources") or {}
        largest = max(SEGMENTS, key=lambda s: lv["segments"][s]["p50"] or 0.0)
        f = lambda x: "—" if x is None else f"{x:.0f}"  # noqa: E731
        share = r.get("caller_cpu_share")
        print(f"{lv['concurrency']:>3} {lv['turns'].get('answered', 0):>5} {f(v['p50']):>8} {f(v['p95']):>6} "
              f"{f(v['p99']):>6}  {largest:<13} {100 * (lv['task_success_rate'] or 0):>4.0f}% "
              f"{f(r.get('cpu_pct')):>5} {f(r.get('machine_busy_pct')):>5} {f(r.get('rss_peak_mb')):>7} "
              f"{'—' if share is None else f'{100 * share:.2f}%':>8} {f((r.get('loop_lag_ms') or {}).get('p99')):>7}")
    cap = summary["capacity"]
    print(f"capacity: {cap['concurrency']} call(s) at once keep V2V p95 ≤ {cap['factor']}× the single-call p95 "
          f"({cap['base_p95_ms']} ms → limit {cap.get('limit_ms')} ms)")
    print(f"simulated callers' CPU share (max over levels): "
          f"{100 * (summary['caller_cpu_share_max'] or 0):.2f}% of this process's CPU time")
    return 0


if __name__ == "__main__":
    sys.exit(main())
