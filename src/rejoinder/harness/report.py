"""One self-contained HTML report per run (plotly, with plotly.js inlined — works offline).

Plots (each in a ``<div id="plot-…">``):

* ``plot-curve`` — V2V percentiles vs concurrency, with the capacity limit;
* ``plot-cdf`` — the V2V CDF of each concurrency level;
* ``plot-stacked`` — mean critical-path segments per level, stacked (they add up to mean V2V);
* ``plot-waterfall`` — one row per turn (first round at the lowest level): each segment drawn
  from where the previous one ended, from ``user_speech_end`` to ``playback_start``.

Then the per-level table, failed checks, and the run's full conditions.
"""

from __future__ import annotations

import html
import json
from pathlib import Path
from typing import Any

import plotly.graph_objects as go
import plotly.io as pio

from ..timeline import SEGMENTS
from .stats import ecdf
from .store import RunStore
from .summary import run_summary, segment_values

COLORS = dict(zip(SEGMENTS, ("#4e79a7", "#f28e2b", "#d37295", "#e15759", "#76b7b2", "#59a14f",
                             "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac")))
MAX_WATERFALL_TURNS = 80


def fig_curve(summary: dict[str, Any]) -> go.Figure:
    fig = go.Figure()
    xs = [p["concurrency"] for p in summary["curve"]]
    for q, dash in (("p50", "solid"), ("p90", "dot"), ("p95", "dash"), ("p99", "longdash")):
        fig.add_trace(go.Scatter(x=xs, y=[p[q] for p in summary["curve"]], mode="lines+markers",
                                 name=f"V2V {q}", line={"dash": dash}))
    cap = summary["capacity"]
    if cap.get("limit_ms"):
        fig.add_hline(y=cap["limit_ms"], line_dash="dot", line_color="grey",
                      annotation_text=f"{cap['factor']}× p95 at {xs[0] if xs else '?'} call(s)")
    fig.update_layout(title="Voice-to-voice latency vs concurrency", xaxis_title="calls at once",
                      yaxis_title="ms", xaxis={"type": "category"})
    return fig


def fig_cdf(turns: list[dict[str, Any]], levels: list[int]) -> go.Figure:
    fig = go.Figure()
    for n in levels:
        xs, ys = ecdf(t["v2v_ms"] for t in turns if t["concurrency"] == n)
        fig.add_trace(go.Scatter(x=xs, y=ys, mode="lines", line_shape="hv", name=f"{n} call(s)"))
    fig.update_layout(title="V2V CDF per concurrency level", xaxis_title="V2V (ms)",
                      yaxis_title="fraction of turns ≤ x", yaxis={"range": [0, 1.02]})
    return fig


def fig_stacked(turns: list[dict[str, Any]], levels: list[int]) -> go.Figure:
    fig = go.Figure()
    labels = [f"{n} call(s)" for n in levels]
    for seg in SEGMENTS:
        ys = []
        for n in levels:
            vals = segment_values([t for t in turns if t["concurrency"] == n], seg)
            ys.append(sum(vals) / len(vals) if vals else 0.0)
        fig.add_trace(go.Bar(x=labels, y=ys, name=seg, marker_color=COLORS[seg]))
    fig.update_layout(barmode="stack", title="Critical path per level (mean ms; stacks add up to mean V2V)",
                      yaxis_title="ms")
    return fig


def fig_waterfall(turns: list[dict[str, Any]], calls: list[dict[str, Any]]) -> go.Figure:
    lowest = min((c["concurrency"] for c in calls), default=None)
    chosen: dict[str, str] = {}
    for c in calls:
        if c["concurrency"] == lowest and c["scenario"] not in chosen:
            chosen[c["scenario"]] = c["id"]
    rows = [t for t in turns if t["call_id"] in chosen.values() and t["v2v_ms"] is not None]
    rows = rows[:MAX_WATERFALL_TURNS]
    names = {cid: scn for scn, cid in chosen.items()}
    ylab = [f"{names[t['call_id']]} · turn {t['turn_id']}" for t in rows]
    fig = go.Figure()
    for seg in SEGMENTS:
        base, width = [], []
        for t in rows:
            acc = 0.0
            for s in SEGMENTS:
                if s == seg:
                    break
                acc += t["segments"].get(s, 0.0)
            base.append(acc)
            width.append(t["segments"].get(seg, 0.0))
        fig.add_trace(go.Bar(y=ylab, x=width, base=base, orientation="h", name=seg,
                             marker_color=COLORS[seg],
                             hovertemplate=f"{seg}: %{{x:.0f}} ms<extra>%{{y}}</extra>"))
    fig.update_layout(barmode="overlay", title="Waterfall per turn: user_speech_end → playback_start "
                      f"({lowest} call(s) at once, first call of each scenario)", xaxis_title="ms after "
                      "the caller stopped speaking", yaxis={"autorange": "reversed"},
                      height=max(400, 22 * len(rows) + 160))
    return fig


def _table(headers: list[str], rows: list[list[Any]]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{html.escape('' if v is None else str(v))}</td>" for v in r)
                   + "</tr>" for r in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _fmt(v: Any) -> str:
    return "—" if v is None else (f"{v:.0f}" if isinstance(v, (int, float)) else str(v))


def level_rows(summary: dict[str, Any]) -> list[list[Any]]:
    rows = []
    for lv in summary["levels"]:
        v, res = lv["v2v_ms"], lv.get("resources") or {}
        largest = max(SEGMENTS, key=lambda s: lv["segments"][s]["p50"] or 0.0)
        rows.append([lv["concurrency"], lv["calls"], lv["turns"].get("answered", 0), _fmt(v["p50"]), _fmt(v["p90"]),
                     _fmt(v["p95"]), _fmt(v["p99"]), largest,
                     f"{lv['stalls']['count']} / {lv['stalls']['total_ms']:.0f} ms",
                     f"{100 * (lv['task_success_rate'] or 0):.0f}%",
                     _fmt(res.get("cpu_pct")), _fmt(res.get("rss_peak_mb")),
                     f"{100 * res['caller_cpu_share']:.2f}%" if res.get("caller_cpu_share") is not None else "—",
                     _fmt((res.get("loop_lag_ms") or {}).get("p99"))])
    return rows


def _pct(v: Any) -> str:
    return "—" if v is None else f"{100 * v:.0f}%"


def _small_talk(st: dict[str, Any] | None) -> str:
    return f"{_pct(st['rate'])} ({st['with_tool']} of {st['turns']} turns)" if st and st.get("turns") else "—"


def success_html(summary: dict[str, Any]) -> str:
    """Task success per scenario and level: n, pass@1, pass^k and the failed checks' causes,
    then the suite's pass@1 (Wilson 95 % interval) and pass^k per level."""
    k = next((lv["pass"]["k"] for lv in summary["levels"] if lv.get("pass")), 1)
    rows = [[lv["concurrency"], name, f"{ts['ok']}/{ts['n']}", _pct(ts.get("pass_at_1", ts.get("rate"))),
             _pct(ts.get("pass_k")), ", ".join(f"{c} ×{n}" for c, n in (ts.get("causes") or {}).items())]
            for lv in summary["levels"] for name, ts in lv["task_success"].items()]
    suite = [[lv["concurrency"], p["scenarios"], p["calls"], _pct(p["pass_at_1"]),
              f"{_pct(p['pass_at_1_ci95'][0])}–{_pct(p['pass_at_1_ci95'][1])}", _pct(p["pass_k"]),
              f"{p['scenarios_all_passed']}/{p['scenarios']}", _small_talk(lv.get("small_talk"))]
             for lv in summary["levels"] if (p := lv.get("pass")) and p["scenarios"]]
    return (f"<h2>Task success: pass@1 and pass^{k}</h2><p>pass@1: share of a scenario's calls that met "
            f"every expectation; pass^{k}: chance that {k} of its calls all pass (C(ok,{k})/C(n,{k})); "
            "n: calls the figure rests on.</p>"
            + _table(["calls at once", "scenarios", "calls (n)", "pass@1", "95% CI (Wilson)", f"pass^{k}",
                      "scenarios passing every call", "tool calls on small talk"], suite)
            + _table(["calls at once", "scenario", "ok/n", "pass@1", f"pass^{k}", "failure causes"], rows))


SHORT_HEADERS = ["N", "calls", "turns", "p50", "p90", "p95", "p99", "largest", "stalls", "ok", "CPU%",
                 "RSS MB", "callers CPU", "lag p99"]
LEVEL_HEADERS = ["calls at once", "calls", "turns", "V2V p50", "p90", "p95", "p99", "largest (p50)",
                 "stalls", "task success", "CPU % (1 core=100)", "RSS peak MB", "callers' CPU share",
                 "loop lag p99 ms"]

_CSS = """body{font-family:system-ui,sans-serif;margin:24px;color:#222}table{border-collapse:collapse;
margin:8px 0 24px}td,th{border:1px solid #ccc;padding:4px 8px;font-size:13px;text-align:left}
th{background:#f3f3f3}pre{background:#f7f7f7;padding:12px;font-size:12px;overflow:auto}
.plot{margin-bottom:24px}"""


def render_html(store: RunStore, run_ref: str) -> str:
    run = store.run(run_ref)
    run_id = run["id"]
    summary = run_summary(store, run_id)
    turns, calls = store.turns(run_id), store.calls(run_id)
    levels = [lv["concurrency"] for lv in summary["levels"]]
    figs = [("plot-curve", fig_curve(summary)), ("plot-cdf", fig_cdf(turns, levels)),
            ("plot-stacked", fig_stacked(turns, levels)), ("plot-waterfall", fig_waterfall(turns, calls))]
    parts = []
    for i, (div_id, fig) in enumerate(figs):
        fig.update_layout(template="plotly_white", margin={"l": 220 if div_id == "plot-waterfall" else 60})
        parts.append('<div class="plot">' + pio.to_html(fig, include_plotlyjs=(i == 0), full_html=False,
                                                        div_id=div_id, config={"displaylogo": False})
                     + "</div>")
    cap = summary["capacity"]
    failures = [[c["concurrency"], c["scenario"], c["id"], "; ".join(c["failures"])]
                for c in calls if c["failures"]]
    notes = "".join(f"<li>{html.escape(n['at'])}: {html.escape(n['text'])}</li>" for n in run["notes"])
    cond = run["conditions"]
    head = (f"<h1>rejoinder run {html.escape(run_id)}</h1><p>suite <b>{html.escape(str(run.get('suite')))}</b>"
            f" · status <b>{html.escape(run['status'])}</b> · {html.escape(run['started_at'])} → "
            f"{html.escape(str(run.get('ended_at')))} · hosting <b>{html.escape(str(cond.get('hosting')))}</b>"
            f" · network <b>{html.escape(str(cond.get('network')))}</b> · capacity "
            f"(p95 ≤ {cap['factor']}× single-call p95): <b>{_fmt(cap['concurrency'])}</b> call(s)</p>")
    body = (head + _table(LEVEL_HEADERS, level_rows(summary)) + success_html(summary) + "".join(parts)
            + "<h2>Failed checks</h2>" + (_table(["calls at once", "scenario", "call", "why"], failures)
                                          if failures else "<p>none</p>")
            + (f"<h2>Notes</h2><ul>{notes}</ul>" if notes else "")
            + "<h2>Conditions</h2><pre>" + html.escape(json.dumps(cond, indent=2, default=str)) + "</pre>")
    return (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>rejoinder run {html.escape(run_id)}"
            f"</title><style>{_CSS}</style></head><body>{body}</body></html>")


def write_report(store: RunStore, run_ref: str, out: Path | None = None) -> Path:
    """Write the report; default path ``rejoinder-report-<run id>.html`` in the current folder."""
    run_id = store.resolve(run_ref)
    path = Path(out) if out else Path(f"rejoinder-report-{run_id}.html")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render_html(store, run_id), encoding="utf-8")
    return path
