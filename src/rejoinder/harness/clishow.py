"""Shared pieces of the harness's commands: the consoles, the run store option, error exit,
and the printed summaries (used by :mod:`.cli` and :mod:`.ray_cli`)."""

from __future__ import annotations

import json
from typing import Any, Optional

import typer
from rich import box
from rich.table import Table

from ..cliout import console, error, plain, table_console

err = console(stderr=True)
out = table_console()  # tables fit the terminal; piped or captured: 132 columns, not 80

STORE_OPT = typer.Option(None, "--store", envvar="REJOINDER_STORE",
                         help="run store: a SQLite file, or postgresql://user:password@host:5432/dbname "
                         "(default: runs.sqlite in the user data directory)")


def _fail(exc: Exception) -> None:
    error(err, exc)
    raise typer.Exit(2)


def _open(store: Optional[str], *, must_exist: bool = False):
    """The run store; ``must_exist`` for read-only commands, so a mistyped path is an error
    instead of a new empty store."""
    from .store import open_store
    return open_store(store, create=not must_exist)


def _store_flag(store: Optional[str]) -> str:
    if store is None:
        return ""
    from .store.postgres import redact
    return f" --store {redact(store)}"


def _levels(text: str) -> list[int]:
    try:
        levels = [int(x) for x in text.replace(" ", "").split(",") if x]
    except ValueError:
        raise typer.BadParameter(f"expected comma-separated integers like 1,2,4, got {text!r}")
    if not levels or any(n < 1 for n in levels):
        raise typer.BadParameter("concurrency levels must be ≥ 1")
    return levels


def print_summary(summary: dict[str, Any]) -> None:
    """Two compact tables (latency; resources) per concurrency level, then capacity and failures."""
    from ..timeline import SEGMENTS
    lat = Table(title=f"run {summary['run_id']}: voice-to-voice latency and time to answer (ms) by N "
                "calls at once",
                box=box.SIMPLE_HEAD)
    for h in ("N", "turns", "p50", "p90", "p95", "p99", "answer p50", "p95 ", "largest seg.", "stalls",
              "tasks ok"):
        lat.add_column(h, justify="left" if h == "largest seg." else "right")
    res = Table(title="resources (CPU% of one core = 100)", box=box.SIMPLE_HEAD)
    for h in ("N", "calls", "wall s", "CPU%", "machine busy%", "LLM shed%", "RSS peak MB", "callers' CPU",
              "loop lag p99"):
        res.add_column(h, justify="right")
    for lv in summary["levels"]:
        v, r = lv["v2v_ms"], lv.get("resources") or {}
        largest = max(SEGMENTS, key=lambda sname: lv["segments"][sname]["p50"] or 0.0)
        ok = lv["task_success_rate"]
        tta = lv.get("time_to_answer_ms") or {}
        lat.add_row(str(lv["concurrency"]), str(lv["turns"].get("answered", 0)), *(_f(v[q]) for q in
                    ("p50", "p90", "p95", "p99")), _f(tta.get("p50")), _f(tta.get("p95")), largest,
                    f"{lv['stalls']['count']}/{lv['stalls']['total_ms']:.0f}ms",
                    "—" if ok is None else f"{100 * ok:.0f}%")
        share = r.get("caller_cpu_share")
        res.add_row(str(lv["concurrency"]), str(lv["calls"]), _f(r.get("wall_s")), _f(r.get("cpu_pct")),
                    _f(r.get("machine_busy_pct")), _f(r.get("llm_shed_pct")), _f(r.get("rss_peak_mb")),
                    "—" if share is None else f"{100 * share:.2f}%", _f((r.get("loop_lag_ms") or {}).get("p99")))
    out.print(lat)
    out.print(res)
    ctl = Table(title="conversation control: over-talk (caller starts → agent audio stops at the caller) "
                "and recovery gap (ms)", box=box.SIMPLE_HEAD)
    for h in ("N", "over-talk p50", "p95", "n", "recovery gap p50", "p95", "faults", "recoveries",
              "overlapping audio", "unheard ctx words", "repeated words", "silences >1 s"):
        ctl.add_column(h, justify="right")
    shown = False
    for lv in summary["levels"]:
        if "overtalk_ms" not in lv:
            continue
        shown = True
        ot, gap = lv["overtalk_ms"], lv["recovery_gap_ms"]
        ctl.add_row(str(lv["concurrency"]), _f(ot["p50"]), _f(ot["p95"]), str(lv.get("overtalk_n", "")),
                    _f(gap["p50"]), _f(gap["p95"]), _f(lv["faults_injected"]), _f(lv["recoveries"]),
                    _f(lv["overlapping_audio"]), _f(lv["unheard_context_words"]),
                    _f(lv.get("repeated_words")),
                    _f(lv["silences_over_1s_in_reply"]))
    if shown:
        out.print(ctl)
    for lv in summary["levels"]:
        if s := lv.get("llm_server"):  # reported by the server itself (llama.cpp timings, usage)
            out.print(f"LLM server, N={lv['concurrency']}: {s.get('requests', 0)} requests reported; "
                      f"prompt {s.get('prompt_tokens', '—')} tokens evaluated "
                      f"({s.get('cached_tokens', '—')} cached) in {_f(s.get('prompt_ms'))} ms, "
                      f"generated {s.get('generated_tokens', '—')} tokens in "
                      f"{_f(s.get('generated_ms'))} ms ({_f(s.get('generated_tokens_per_s'))} tokens/s)")
    print_turn_taking(summary)
    cap = summary["capacity"]
    if cap.get("concurrency") is not None:
        out.print(f"capacity: up to [bold]{cap['concurrency']}[/] call(s) at once keep V2V p95 within "
                  f"{cap['factor']}× the single-level p95 ({cap['base_p95_ms']:.0f} ms → "
                  f"limit {cap['limit_ms']:.0f} ms)")
    print_outcomes(summary)


def print_turn_taking(summary: dict[str, Any]) -> None:
    """Caller realism per level: sounds over replies the agent talked on after (by verdict),
    turns rejected as noise, idle reprompts, agent hang-ups, endpointing after dictation."""
    t = Table(title="turn-taking with real callers: talked on after a sound over the reply, noise "
              "rejected, idle, endpointing after a dictated number (ms)", box=box.SIMPLE_HEAD)
    for h in ("N", "backchannel", "non-speech", "unclear", "noise turns rejected", "idle prompts",
              "hang-ups", "transfers", "dictation endpt p50", "p95", "n"):
        t.add_column(h, justify="right")
    rows = 0
    for lv in summary["levels"]:
        tt = lv.get("turn_taking")
        if not tt:
            continue
        rows += 1
        res, d = tt["resumed"], tt["dictation_endpointing_ms"]
        t.add_row(str(lv["concurrency"]), *(str(res.get(k, 0)) for k in ("backchannel", "non_speech", "unclear")),
                  str(tt["rejected_noise"]), str(tt["idle_prompts"]), str(tt["hangups"]),
                  str(tt.get("transfers", 0)), _f(d["p50"]),
                  _f(d["p95"]), str(d["n"]))
    if rows:
        out.print(t)
    from .eotsummary import eot_table
    eot = eot_table(summary)
    if eot is not None:
        out.print(eot)


def print_outcomes(summary: dict[str, Any]) -> None:
    """Each scenario's outcome per level: calls that met every expectation (n, pass@1, pass^k),
    and why others did not; then the suite's pass@1 (Wilson 95 % interval) and pass^k."""
    k = next((lv["pass"]["k"] for lv in summary["levels"] if lv.get("pass")), 1)
    t = Table(title=f"scenario outcomes: pass@1 (share of calls that met every expectation) and pass^{k} "
              f"({k} calls all pass)", box=box.SIMPLE_HEAD)
    for h in ("scenario", "N", "ok/n", "pass@1", f"pass^{k}", "failure causes", "first failed check"):
        t.add_column(h, overflow="fold", justify="left" if h in ("scenario", "failure causes",
                                                                   "first failed check") else "right")
    for lv in summary["levels"]:
        for name, ts in lv["task_success"].items():
            why = (ts.get("failures") or [""])[0]
            ok = f"{ts['ok']}/{ts['n']}"
            causes = ", ".join(f"{c} ×{n}" for c, n in (ts.get("causes") or (lv.get("failure_causes") or {})
                                                         .get(name) or {}).items())
            t.add_row(plain(name), str(lv["concurrency"]), ok if ts["ok"] == ts["n"] else f"[red]{ok}[/]",
                      _pct(ts.get("pass_at_1", ts.get("rate"))), _pct(ts.get("pass_k")), plain(causes), plain(why))
    out.print(t)
    for lv in summary["levels"]:
        p = lv.get("pass")
        if not p or not p["scenarios"]:
            continue
        lo, hi = p["pass_at_1_ci95"]
        out.print(f"{lv['concurrency']} at once: pass@1 [bold]{_pct(p['pass_at_1'])}[/] over {p['scenarios']} "
                  f"scenario(s), {p['calls']} call(s) (95 % CI {_pct(lo)}–{_pct(hi)}) · pass^{p['k']} "
                  f"[bold]{_pct(p['pass_k'])}[/]"
                  + ("" if p["pass_k"] is not None else f" (needs ≥ {p['k']} calls of every scenario)")
                  + f" · {p['scenarios_all_passed']}/{p['scenarios']} scenario(s) passed every call"
                  + (f" · tool calls on small talk {_pct(st['rate'])} ({st['with_tool']} of {st['turns']} turns)"
                     if (st := lv.get("small_talk") or {}).get("turns") else ""))


def _pct(v: Any) -> str:
    return "—" if v is None else f"{100 * v:.0f}%"


def _f(v: Any, signed: bool = False) -> str:
    if v is None:
        return "—"
    return f"{v:+.0f}" if signed else f"{v:.0f}"


def show_run(store: Any, run_id: str, report: Any, json_out: bool) -> None:
    """A stored run as ``bench`` prints it: the HTML report's path (when ``report`` names one,
    written first), then the run's summary as JSON on stdout or as tables."""
    from .summary import run_summary

    summary = run_summary(store, run_id)
    if report:
        from .report import write_report
        err.print(f"report: {plain(str(write_report(store, run_id, report)))}", soft_wrap=True)
    if json_out:
        print(json.dumps(summary, indent=2, default=str))
    else:
        print_summary(summary)
