"""``rejoinder bench --hosting A,B --network X,Y``: run the comparison and print it side by side."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from rich import box
from rich.table import Table


def _pair(d: dict[str, Any] | None) -> str:
    if not d or d.get("p50") is None:
        return "—"
    return f"{d['p50']:.0f} / {d['p95']:.0f}"


def _num(v: Any, fmt: str = "{:.0f}") -> str:
    return "—" if v is None else fmt.format(v)


def print_comparison(out: Any, cmp: dict[str, Any]) -> None:
    """The comparison as four tables: critical path, cold start and resources, network, failures."""
    from ..timeline import SEGMENTS

    runs = cmp["runs"]
    lat = Table(title="critical path by arrangement · ms, p50 / p95 (segments add up to V2V in every turn)",
                box=box.SIMPLE_HEAD)
    lat.add_column("boundary")
    for r in runs:
        lat.add_column(r["label"], justify="right")
    lat.add_row("V2V", *(_pair(r["v2v_ms"]) for r in runs), style="bold")
    for s in SEGMENTS:
        lat.add_row(s, *(_pair(r["segments"].get(s)) for r in runs))
    lat.add_row("turns answered", *(str(r["turns"]) for r in runs))
    lat.add_row("max |Σ segments − V2V|", *(_num(r["segments_sum_max_dev_ms"], "{:.3f}") for r in runs))
    out.print(lat)

    res = Table(title="cold start (process start → first answered request, ms) and CPU% (100 = one core) / "
                "peak RSS MB per process", box=box.SIMPLE_HEAD)
    res.add_column("process")
    for r in runs:
        res.add_column(r["label"], justify="right")
    names = sorted({n for r in runs for n in r["resources"]} | {n for r in runs for n in r["cold_start_ms"]},
                   key=lambda n: (n != "agent", n))
    for n in names:
        if any(n in r["cold_start_ms"] for r in runs):
            res.add_row(f"{n} cold start", *(_num(r["cold_start_ms"].get(n)) for r in runs))
    for n in names:
        cells = []
        for r in runs:
            x = r["resources"].get(n) or {}
            cells.append("—" if not x else f"{_num(x.get('cpu_pct'))}% / {_num(x.get('rss_peak_mb'))}")
        res.add_row(f"{n} CPU / RSS", *cells)
    out.print(res)

    net = Table(title="network between the agent and its model servers", box=box.SIMPLE_HEAD)
    for h in ("run", "profile", "RTT ms", "jitter σ", "loss %", "emulator", "measured socket RTT p50 / p95",
              "added vs loopback (within 10 %?)"):
        net.add_column(h)
    for r in runs:
        n = r["network"] or {}
        m = n.get("measured_rtt") or {}
        net.add_row(r["label"], str(n.get("name")), _num(n.get("rtt_ms"), "{:g}"), _num(n.get("jitter_ms"), "{:g}"),
                    _num(n.get("loss_pct"), "{:g}"), str(n.get("emulator") or "—"),
                    "—" if not m else f"{m['median_ms']:.2f} / {m['p95_ms']:.2f}",
                    "—" if "added_rtt_ms" not in n else
                    f"{n['added_rtt_ms']:.2f} ({'yes' if n['added_within_10pct'] else 'NO'})")
    out.print(net)

    failed = [r for r in runs if r["failure"]]
    if failed:
        ft = Table(title="under a mid-stream TTS failure (half of the requests die mid-sentence)", box=box.SIMPLE_HEAD)
        for h in ("run", "fault", "recoveries", "recovery gap p50 / p95 ms", "stalls", "overlapping audio",
                  "unheard ctx words", "repeated words", "silences >1 s", "tasks ok"):
            ft.add_column(h)
        for r in failed:
            c = r["control"]
            ok = c.get("task_success_rate")
            ft.add_row(r["label"], r["failure"], str(c.get("recoveries")), _pair(c.get("recovery_gap_ms")),
                       str((c.get("stalls") or {}).get("count")), str(c.get("overlapping_audio")),
                       str(c.get("unheard_context_words")), str(c.get("repeated_words")),
                       str(c.get("silences_over_1s_in_reply")),
                       "—" if ok is None else f"{100 * ok:.0f}%")
        out.print(ft)
    for r in runs[1:]:
        real = r.get("real_vs_first") or []
        text = ", ".join(f"{x['boundary']} {x['diff_ms']:+.0f} ms [{x['ci95'][0]:.0f}, {x['ci95'][1]:.0f}]"
                         for x in real) or "none"
        out.print(f"{r['label']} vs {runs[0]['label']}: real differences: {text}")


def run_hosting(*, hosting: list[str], networks: list[str], failures: bool, cfg: Any, scenarios: list,
                store: Any, opts: Any, suite: str, command: str, err: Any, out: Any, json_out: bool) -> int:
    """Run the comparison; returns the exit code. Preflights the network first: where namespaces
    cannot be created nothing starts."""
    from ..cliout import error, plain
    from ..errors import RejoinderError
    from .hosting import check_network, comparison, plans, run_plans

    try:
        items = plans(hosting, networks, failures)
        emulator = check_network(items)
    except RejoinderError as exc:
        error(err, exc)
        return 2
    err.print(f"{len(items)} run(s): " + ", ".join(p.label for p in items)
              + (f" · network emulator: {emulator}" if emulator else ""))
    logs = Path(store.path).parent / "server-logs"

    def on_run(plan, run_id):
        err.print(f"[bold]{plan.label}[/] → run {run_id}")

    try:
        results = asyncio.run(run_plans(items, cfg, scenarios, store, opts, suite=suite, command=command,
                                        logs=logs, on_run=on_run))
    except KeyboardInterrupt:
        err.print("[yellow]interrupted[/]: finished runs are stored; servers and namespaces were removed")
        return 130
    except RejoinderError as exc:
        error(err, f"{exc} (server logs: {logs})")
        return 2
    cmp = comparison(store, results)
    if json_out:
        print(json.dumps(cmp, indent=2, default=str))
    else:
        print_comparison(out, cmp)
    ids = " ".join(r for _, r, _ in results)
    err.print(f"stored runs: {ids}; `rejoinder runs compare {results[0][1]} RUN --store {plain(store.path)}` "
              "for any pair")
    return 0
