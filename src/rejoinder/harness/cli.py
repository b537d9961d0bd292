"""CLI commands of the harness: ``bench``, ``runs …``, ``report``, ``scenarios``.

Registered on the main typer app by :mod:`rejoinder.cli`. Heavy imports (models, plotly) happen
inside the commands so ``rejoinder --help`` stays fast.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any, Optional

import typer
from rich import box
from rich.table import Table
from rich.text import Text

from ..cliout import console, error, table_console
from ..cliout import plain
from ..errors import RejoinderError

err = console(stderr=True)
out = table_console()  # tables fit the terminal; piped or captured: 132 columns, not 80

STORE_OPT = typer.Option(None, "--store", envvar="REJOINDER_STORE",
                         help="run store file (default: runs.sqlite in the user data directory)")


def _fail(exc: Exception) -> None:
    error(err, exc)
    raise typer.Exit(2)


def _open(store: Optional[Path], *, must_exist: bool = False):
    """The run store; ``must_exist`` for read-only commands, so a mistyped path is an error
    instead of a new empty store."""
    from .store import RunStore, StoreError, default_store_path
    path = store if store is not None else default_store_path()
    if must_exist and not Path(path).exists():
        raise StoreError(f"no run store at {path}; run `rejoinder bench` first or pass the right --store")
    return RunStore(store)


def _store_flag(store: Optional[Path]) -> str:
    return f" --store {store}" if store is not None else ""


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
    for h in ("N", "calls", "wall s", "CPU%", "machine busy%", "RSS peak MB", "callers' CPU", "loop lag p99"):
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
                    _f(r.get("machine_busy_pct")), _f(r.get("rss_peak_mb")),
                    "—" if share is None else f"{100 * share:.2f}%", _f((r.get("loop_lag_ms") or {}).get("p99")))
    out.print(lat)
    out.print(res)
    ctl = Table(title="conversation control: over-talk (caller starts → agent audio stops at the caller) "
                "and recovery gap (ms)", box=box.SIMPLE_HEAD)
    for h in ("N", "over-talk p50", "p95", "n", "recovery gap p50", "p95", "faults", "recoveries",
              "overlapping audio", "unheard ctx words", "silences >1 s"):
        ctl.add_column(h, justify="right")
    shown = False
    for lv in summary["levels"]:
        if "overtalk_ms" not in lv:
            continue
        shown = True
        ot, gap = lv["overtalk_ms"], lv["recovery_gap_ms"]
        ctl.add_row(str(lv["concurrency"]), _f(ot["p50"]), _f(ot["p95"]), str(lv.get("overtalk_n", "")),
                    _f(gap["p50"]), _f(gap["p95"]), str(lv["faults_injected"]), str(lv["recoveries"]),
                    str(lv["overlapping_audio"]), str(lv["unheard_context_words"]),
                    str(lv["silences_over_1s_in_reply"]))
    if shown:
        out.print(ctl)
    cap = summary["capacity"]
    if cap.get("concurrency") is not None:
        out.print(f"capacity: up to [bold]{cap['concurrency']}[/] call(s) at once keep V2V p95 within "
                  f"{cap['factor']}× the single-level p95 ({cap['base_p95_ms']:.0f} ms → "
                  f"limit {cap['limit_ms']:.0f} ms)")
    fails: dict[str, int] = {}
    for lv in summary["levels"]:
        for name, ts in lv["task_success"].items():
            fails[name] = fails.get(name, 0) + ts["n"] - ts["ok"]
    bad = {k: v for k, v in fails.items() if v}
    if bad:
        causes: dict[str, dict[str, int]] = {}
        for lv in summary["levels"]:
            for name, cs in (lv.get("failure_causes") or {}).items():
                for cause, n in cs.items():
                    causes.setdefault(name, {})[cause] = causes.get(name, {}).get(cause, 0) + n
        out.print(plain("failed tasks: " + ", ".join(
            f"{k} ×{v}" + (" (" + ", ".join(f"{c} ×{n}" for c, n in causes.get(k, {}).items()) + ")"
                           if causes.get(k) else "") for k, v in bad.items())
            + "  (see `rejoinder runs show` / the report)"))


def register(app: typer.Typer) -> None:
    """Add the harness commands to ``app``."""
    runs = typer.Typer(help="Browse, search, annotate and compare stored runs.", no_args_is_help=True,
                       rich_markup_mode=None)
    app.add_typer(runs, name="runs")

    @app.command()
    def bench(suite: Optional[str] = typer.Argument(None, help="suite name, folder or scenario file "
                                                    "(default: the bundled 'reference' suite)"),
              concurrency: str = typer.Option("1,2,4", help="comma-separated levels: calls at once"),
              repeat: int = typer.Option(1, min=1, help="times each worker plays the suite per level"),
              scenarios: Optional[str] = typer.Option(None, help="only these scenario names (comma-separated)"),
              agent: Optional[str] = typer.Option(None, help="the agent: YAML file, module:attribute "
                                                  "or bundled name (default: support)"),
              config: Optional[Path] = typer.Option(None, help="runtime config YAML"),
              tts: Optional[str] = typer.Option(None, help="TTS adapter: piper | espeak"),
              llm: Optional[str] = typer.Option(None, help="LLM adapter: smollm2 | openai"),
              hosting: Optional[str] = typer.Option(None, help="hosting-arrangement label"),
              network: Optional[str] = typer.Option(None, help="network-profile label"),
              note: Optional[str] = typer.Option(None, help="free-text note stored with the run"),
              faults: Optional[str] = typer.Option(None, help="inject faults into every call: a spec "
                                                   "like 'tts:drop@1%0.3,llm:stall=2500@3' or 'default'"),
              fault_seed: int = typer.Option(0, help="seed of the fault injection"),
              store: Optional[Path] = STORE_OPT,
              artifacts: Optional[Path] = typer.Option(None, help="per-call timelines/transcripts folder "
                                                       "(default: beside the store)"),
              keep_audio: bool = typer.Option(False, help="keep each call's stereo recording"),
              call_timeout: float = typer.Option(600.0, help="seconds before a call counts as failed"),
              report: Optional[Path] = typer.Option(None, help="also write the HTML report here"),
              json_out: bool = typer.Option(False, "--json", help="print the JSON summary on stdout")) -> None:
        """Run the suite at each concurrency level and store the run (N calls at once in this process)."""
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        from . import conditions as cond_mod
        from .bench import BenchOptions, run_bench
        from .suite import load_suite, scenario_hash
        from .summary import run_summary
        levels = _levels(concurrency)
        try:
            from ..config import load_config
            from ..runtime import Runtime
            label, scs = load_suite(suite, [s for s in (scenarios or "").split(",") if s] or None)
            cfg = load_config(config, agent=agent, tts=tts, llm=llm)
            if hosting:
                cfg.hosting = hosting
            if network:
                cfg.network = network
            if faults:
                from ..adapters.faults import parse_faults
                parse_faults(faults)
                cfg.faults, cfg.fault_seed = faults, fault_seed
            from ..adapters.registry import validate
            validate(cfg.stack)
            runtime = Runtime(cfg)
            st = _open(store)
        except RejoinderError as exc:
            _fail(exc)
        hashes = {sc.name: scenario_hash(sc) for sc in scs}
        conds = cond_mod.collect(cfg, concurrency=levels, scenarios=hashes, repeat=repeat, suite=label,
                                 agent=runtime.agent)
        run_id = st.begin_run(conds, suite=label, command=" ".join(["rejoinder"] + sys.argv[1:]))
        if note:
            st.add_note(run_id, note)
        total = sum(levels) * len(scs) * repeat
        err.print(f"run [bold]{run_id}[/] · {len(scs)} scenario(s) × levels {levels} × {repeat} → {total} calls "
                  f"· store {plain(st.path)}")
        failed = 0
        with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                      TimeElapsedColumn(), console=err) as progress:
            task = progress.add_task("loading models…", total=total)

            def on_call(rec: dict[str, Any]) -> None:
                nonlocal failed
                failed += 0 if rec["success"] else 1
                progress.update(task, advance=1, description=f"{rec['concurrency']} at once · "
                                f"{failed} failed task(s)")

            opts = BenchOptions(levels=levels, repeat=repeat, hashes=hashes, on_call=on_call,
                                artifacts=artifacts or st.path.parent / "artifacts", keep_audio=keep_audio,
                                call_timeout_s=call_timeout)
            try:
                status = asyncio.run(run_bench(runtime, scs, st, run_id, opts))
            except KeyboardInterrupt:
                err.print(f"[yellow]interrupted[/]: every finished call of run {run_id} is stored")
                raise typer.Exit(130)
            except RejoinderError as exc:
                _fail(exc)
        summary = run_summary(st, run_id)
        if report:
            from .report import write_report
            err.print(f"report: {plain(write_report(st, run_id, report))}")
        if json_out:
            print(json.dumps(summary, indent=2, default=str))
        else:
            print_summary(summary)
        err.print(f"stored as run [bold]{run_id}[/] ({status}); "
                  f"`rejoinder report {run_id}{plain(_store_flag(store))}` for the plots")

    @runs.command("list")
    def runs_list(limit: int = typer.Option(20, help="newest N runs"), store: Optional[Path] = STORE_OPT,
                  json_out: bool = typer.Option(False, "--json")) -> None:
        """The newest runs: status, suite, levels, calls and task success."""
        try:
            rows = _open(store, must_exist=True).runs(limit)
        except RejoinderError as exc:
            _fail(exc)
        if json_out:
            print(json.dumps([{k: r[k] for k in ("id", "started_at", "ended_at", "status", "suite",
                                                 "n_calls", "n_ok")} for r in rows], indent=2))
            return
        t = Table(title="runs", box=box.SIMPLE_HEAD)
        for h in ("run", "started (UTC)", "status", "tts", "levels", "calls", "ok", "suite"):
            t.add_column(h, no_wrap=h != "suite", overflow="fold")
        for r in rows:
            c = r["conditions"]
            t.add_row(r["id"], r["started_at"][:16].replace("T", " "), r["status"],
                      str(((c.get("config") or {}).get("stack") or {}).get("tts", "")),
                      ",".join(map(str, c.get("concurrency", []))), str(r["n_calls"]), str(r["n_ok"] or 0),
                      str(r.get("suite") or ""))
        out.print(t)

    @runs.command("show")
    def runs_show(run: str = typer.Argument("last", help="run id, unique prefix, or last / last~N"),
                  store: Optional[Path] = STORE_OPT, json_out: bool = typer.Option(False, "--json")) -> None:
        """A run's summary per level, its notes and its failed checks."""
        from .summary import run_summary
        try:
            st = _open(store, must_exist=True)
            info, summary = st.run(run), run_summary(st, run)
        except RejoinderError as exc:
            _fail(exc)
        if json_out:
            print(json.dumps({"run": info, "summary": summary}, indent=2, default=str))
            return
        c = info["conditions"]
        code = c.get("code", {})
        out.print(f"[bold]{info['id']}[/] {info['status']} · {info['started_at']} → {info.get('ended_at')}\n"
                  f"command: {plain(str(info.get('command')))}\ncode: {code.get('commit')} dirty={code.get('dirty')} "
                  f"rejoinder {code.get('rejoinder')} · hosting {c.get('hosting')} · network {c.get('network')}\n"
                  f"machine: {(c.get('machine') or {}).get('cpu_model')} ×{(c.get('machine') or {}).get('cores_logical')}"
                  f" · stack: {_stack_names((c.get('config') or {}).get('stack') or {})}")
        print_summary(summary)
        for n in info["notes"]:
            out.print(f"note {n['at'][:19]}: {plain(n['text'])}")
        for call in st.calls(info["id"]):
            for f in call["failures"]:
                out.print(f"[red]✗[/] {call['concurrency']} at once · {plain(call['scenario'])}: {plain(f)}")

    @runs.command("search")
    def runs_search(text: str = typer.Argument(..., help='words (all required), or FTS5 syntax: "a phrase", OR, prefix*'),
                    store: Optional[Path] = STORE_OPT, limit: int = typer.Option(30),
                    json_out: bool = typer.Option(False, "--json")) -> None:
        """Full-text search over transcripts, failure reasons, notes and run conditions."""
        try:
            hits = _open(store, must_exist=True).search(text, limit)
        except RejoinderError as exc:
            _fail(exc)
        if json_out:
            print(json.dumps(hits, indent=2))
            return
        t = Table(title=f"search: {plain(text)}")
        for h in ("run", "call", "kind", "match"):
            t.add_column(h, overflow="fold")
        for h in hits:
            t.add_row(h["run_id"], h["call_id"] or "", h["kind"], Text(h["snippet"]))
        out.print(t if hits else "no matches")

    @runs.command("note")
    def runs_note(run: str = typer.Argument(...), text: str = typer.Argument(...),
                  store: Optional[Path] = STORE_OPT) -> None:
        """Attach a free-text note to a run (searchable)."""
        try:
            st = _open(store, must_exist=True)
            st.add_note(run, text)
        except RejoinderError as exc:
            _fail(exc)
        err.print(f"noted on {plain(st.resolve(run))}")

    @runs.command("compare")
    def runs_compare(a: str = typer.Argument(..., help="run A (baseline)"), b: str = typer.Argument(..., help="run B"),
                     concurrency: Optional[int] = typer.Option(None, help="only this level"),
                     min_ms: float = typer.Option(10.0, help="smallest difference worth calling real"),
                     store: Optional[Path] = STORE_OPT, json_out: bool = typer.Option(False, "--json")) -> None:
        """Every boundary side by side: medians, Δ (B − A), bootstrap 95 % CI, and which are real."""
        from .compare import compare_runs
        try:
            res = compare_runs(_open(store, must_exist=True), a, b, concurrency=concurrency, min_ms=min_ms)
        except RejoinderError as exc:
            _fail(exc)
        if json_out:
            print(json.dumps(res, indent=2, default=str))
            return
        if res["conditions_differ"]:
            out.print("[bold]conditions that differ[/] (A → B):")
            for d in res["conditions_differ"][:25]:
                va, vb = (json.dumps(d[k], default=str)[:80] for k in ("a", "b"))
                out.print(plain(f"  {d['key']}: {va} → {vb}"))
        for lv in res["levels"]:
            t = Table(title=f"{res['a']} (A) vs {res['b']} (B) · {lv['concurrency']} call(s) at once · ms")
            for h in ("boundary", "median A", "median B", "Δ B−A", "95% CI", "n A/B", "verdict", "waits on"):
                t.add_column(h, no_wrap=h != "waits on")
            for r in lv["rows"]:
                ci = "—" if r["ci95"][0] is None else f"[{r['ci95'][0]:.0f}, {r['ci95'][1]:.0f}]"
                colour = {"real": "bold green", "no difference": "dim"}.get(r["verdict"], "")
                t.add_row(r["boundary"], _f(r["median_a"]), _f(r["median_b"]), _f(r["diff"], True), ci,
                          f"{r['n_a']}/{r['n_b']}", f"[{colour}]{r['verdict']}[/]" if colour else r["verdict"],
                          f"[dim]{r['means']}[/]")
            out.print(t)
            out.print("real differences: " + (", ".join(lv["real"]) or "none")
                      + f"  (family-wise 95 % CI excludes 0 and |Δ| ≥ {res['min_ms']:.0f} ms)")

    @app.command()
    def report(run: str = typer.Argument("last", help="run id, unique prefix, or last"),
               out_path: Optional[Path] = typer.Option(None, "--out", help="HTML file to write"),
               store: Optional[Path] = STORE_OPT) -> None:
        """Write one self-contained HTML report (plots + conditions) and print the summary table."""
        from .report import write_report
        from .summary import run_summary
        try:
            st = _open(store, must_exist=True)
            path = write_report(st, run, out_path)
            print_summary(run_summary(st, run))
        except RejoinderError as exc:
            _fail(exc)
        err.print(f"report: {plain(path.resolve())}")

    @app.command("scenarios")
    def scenarios_cmd(suite: Optional[str] = typer.Argument(None, help="suite name, folder or file")) -> None:
        """Validate a suite and list its scenarios (default: the bundled 'reference' suite)."""
        from .suite import load_suite
        try:
            label, scs = load_suite(suite)
        except RejoinderError as exc:
            _fail(exc)
        t = Table(title=f"suite {plain(label)}")
        for h in ("scenario", "turns", "tags", "description"):
            t.add_column(h, overflow="fold")
        for sc in scs:
            t.add_row(sc.name, str(len(sc.turns)), ",".join(sc.tags), sc.description)
        out.print(t)


def _stack_names(stack: dict[str, Any]) -> str:
    return " ".join(f"{k}={stack[k]}" for k in ("vad", "turn", "stt", "llm", "tts") if k in stack)


def _f(v: Any, signed: bool = False) -> str:
    if v is None:
        return "—"
    return f"{v:+.0f}" if signed else f"{v:.0f}"
