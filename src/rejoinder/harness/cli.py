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

from ..cliout import plain
from ..errors import RejoinderError

from .clishow import (STORE_OPT, _f, _fail, show_run, _levels, _open, _pct, _store_flag, err, out,  # noqa: F401
                      print_outcomes, print_summary, print_turn_taking)


def register(app: typer.Typer) -> None:
    """Add the harness commands to ``app``."""
    runs = typer.Typer(help="Browse, search, annotate and compare stored runs.", no_args_is_help=True,
                       rich_markup_mode=None)
    app.add_typer(runs, name="runs")

    @app.command()
    def bench(suite: Optional[str] = typer.Argument(None, help="suite name, folder or scenario file, or "
                                                    "several comma-separated (default: the bundled "
                                                    "'reference' suite)"),
              suite_opt: Optional[str] = typer.Option(None, "--suite", help="the same as the SUITE argument, "
                                                      "e.g. --suite heldout or --suite reference,heldout"),
              concurrency: str = typer.Option("1,2,4", help="comma-separated levels: calls at once"),
              repeat: int = typer.Option(1, min=1, help="times each worker plays the suite per level"),
              scenarios: Optional[str] = typer.Option(None, help="only these scenario names (comma-separated)"),
              agent: Optional[str] = typer.Option(None, help="the agent: YAML file, module:attribute "
                                                  "or bundled name (default: support)"),
              config: Optional[Path] = typer.Option(None, help="runtime config YAML"),
              tts: Optional[str] = typer.Option(None, help="TTS adapter: piper | espeak"),
              llm: Optional[str] = typer.Option(None, help="LLM adapter: smollm2 | llama | openai"),
              llm_model: Optional[Path] = typer.Option(None, "--llm-model", help="a local GGUF for "
                                                       "the in-process LLM (chat format from its "
                                                       "metadata)"),
              hosting: Optional[str] = typer.Option(None, help="compare hosting arrangements, comma-separated: "
                                                    "in-process, servers, managed-tts, managed-bidi, "
                                                    "speech-to-speech, ray-serve"),
              network: Optional[str] = typer.Option(None, help="network profiles for the server arrangements, "
                                                    "comma-separated: loopback, same-zone, cross-zone, regional, "
                                                    "cross-region, regional-lossy"),
              failures: bool = typer.Option(False, "--failures", help="with --hosting: also run each "
                                            "arrangement with the TTS stream dying mid-sentence"),
              note: Optional[str] = typer.Option(None, help="free-text note stored with the run"),
              faults: Optional[str] = typer.Option(None, help="inject faults into every call: a spec "
                                                   "like 'tts:drop@1%0.3,llm:stall=2500@3' or 'default'"),
              fault_seed: int = typer.Option(0, help="seed of the fault injection"),
              store: Optional[str] = STORE_OPT,
              artifacts: Optional[Path] = typer.Option(None, help="per-call timelines/transcripts folder "
                                                       "(default: beside the store)"),
              keep_audio: bool = typer.Option(False, help="keep each call's stereo recording"),
              call_timeout: float = typer.Option(600.0, help="seconds before a call counts as failed"),
              report: Optional[Path] = typer.Option(None, help="also write the HTML report here"),
              json_out: bool = typer.Option(False, "--json", help="print the JSON summary on stdout"),
              tag: Optional[str] = typer.Option(None, help="only scenarios with one of these tags (comma-separated), "
                                                "e.g. real-speech"),
              target: Optional[str] = typer.Option(None, help="call an agent over a socket instead: ws://HOST:PORT/PATH "
                                                   "(Twilio Media Streams, or rejoinder's /ws)"),
              protocol: str = typer.Option("auto", help="with --target: twilio | rejoinder | auto (a path ending in "
                                           "/ws is rejoinder's protocol)"),
              target_token: Optional[str] = typer.Option(None, envvar="REJOINDER_TARGET_TOKEN",
                                                         help="with --target: the target's token"),
              jitter_ms: float = typer.Option(60.0, help="with --target: the caller's jitter buffer (ms), part of V2V"),
              ray: Optional[str] = typer.Option(None, "--ray", help="run the callers on a Ray cluster: local (start "
                                                "one here), auto, or the head's HOST:PORT (needs rejoinder[ray])"),
              ray_workers: Optional[int] = typer.Option(None, min=1, help="with --ray: caller processes (default: "
                                                        "one per CPU of the cluster, at most the highest level)"),
              ray_cpus: Optional[int] = typer.Option(None, min=1, help="with --ray local: CPUs of the local cluster"),
              zero_cost: bool = typer.Option(False, "--zero-cost", help="zero-cost models (every stage answers at "
                                             "once): measures the orchestration and the callers only")
              ) -> None:
        """Run the suite at each concurrency level and store the run (N calls at once in this process,
        or N sockets to --target)."""
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        from . import conditions as cond_mod
        from .bench import BenchOptions, run_bench
        from .suite import load_suite, scenario_hash
        levels = _levels(concurrency)
        tags = [t for t in (tag or "").split(",") if t] or None
        if suite and suite_opt and suite != suite_opt:
            _fail(RejoinderError(f"two suites given ({suite!r} and --suite {suite_opt!r}); give one"))
        suite = suite or suite_opt
        if target:
            local = [f"--{k}" for k, v in (("agent", agent), ("config", config), ("tts", tts), ("llm", llm),
                                           ("llm-model", llm_model), ("faults", faults)) if v]
            if local:
                _fail(RejoinderError(f"{', '.join(local)} configure the in-process agent; with --target the agent "
                                     "is the target (configure it there)"))
            if zero_cost:
                _fail(RejoinderError("--zero-cost configures the in-process agent; with --target the agent is the "
                                     "target (start it with `rejoinder serve --zero-cost`)"))
            from .remote import cli as remote_cli
            if ray:
                from .ray_cli import bench_target
                bench_target(address=ray, workers=ray_workers, cpus=ray_cpus, url=target, protocol=protocol,
                             token=target_token, jitter_ms=jitter_ms, suite=suite, tags=tags, levels=levels,
                             only=[s for s in (scenarios or "").split(",") if s] or None, repeat=repeat,
                             hosting=hosting, network=network, store=store, note=note, call_timeout=call_timeout,
                             report=report, json_out=json_out)
                return
            remote_cli.bench(target_url=target, protocol=protocol, token=target_token, jitter_ms=jitter_ms,
                             suite=suite, only=[s for s in (scenarios or "").split(",") if s] or None, tags=tags,
                             levels=levels, repeat=repeat, hosting=hosting, network=network, note=note, store=store,
                             artifacts=artifacts, keep_audio=keep_audio, call_timeout=call_timeout, report=report,
                             json_out=json_out, ui=sys.modules[__name__])
            return
        try:
            from ..config import load_config
            from ..runtime import Runtime
            label, scs = load_suite(suite, [s for s in (scenarios or "").split(",") if s] or None)
            if tags:
                scs = [sc for sc in scs if set(tags) & set(sc.tags)]
                if not scs:
                    raise RejoinderError(f"{label}: no scenario is tagged {', '.join(tags)}")
            cfg = load_config(config, agent=agent, tts=tts, llm=llm, llm_model=llm_model)
            if faults:
                from ..adapters.faults import parse_faults
                parse_faults(faults)
                cfg.faults, cfg.fault_seed = faults, fault_seed
            from ..adapters.registry import validate
            validate(cfg.stack)
            if zero_cost:
                from .zerocost import ZeroCostRuntime
                runtime = ZeroCostRuntime(cfg)
            else:
                runtime = Runtime(cfg)
            st = _open(store)
        except RejoinderError as exc:
            _fail(exc)
        hashes = {sc.name: scenario_hash(sc) for sc in scs}
        if ray and (hosting or network):
            _fail(RejoinderError("--ray runs the callers on a cluster; --hosting/--network compare arrangements "
                                 "in this process (the ray-serve arrangement: --hosting ray-serve, without --ray)"))
        if ray:  # the callers on Ray actors, each with its own agent
            from .ray_cli import bench_local
            bench_local(address=ray, workers=ray_workers, cpus=ray_cpus, cfg=cfg, zero_cost=zero_cost,
                        runtime=runtime, scenarios=scs, label=label, levels=levels, repeat=repeat, hashes=hashes,
                        store=st, store_flag=plain(_store_flag(store)), note=note, call_timeout=call_timeout,
                        report=report, json_out=json_out)
            return
        if hosting or network:  # the hosting comparison: one stored run per arrangement × profile
            from .bench import BenchOptions as _Opts
            from .hosting_cli import run_hosting
            raise typer.Exit(run_hosting(
                hosting=[h for h in (hosting or "servers").replace(" ", "").split(",") if h],
                networks=[n for n in (network or "loopback").replace(" ", "").split(",") if n],
                failures=failures, cfg=cfg, scenarios=scs, store=st, suite=label, err=err, out=out,
                json_out=json_out, command=" ".join(["rejoinder"] + sys.argv[1:]),
                opts=_Opts(levels=levels, repeat=repeat, hashes=hashes, call_timeout_s=call_timeout,
                           artifacts=artifacts or st.path.parent / "artifacts", keep_audio=keep_audio)))
        from .ledger import run_ledger
        ledger = run_ledger(cfg, arrangement="in-process" if cfg.stack.stt == "whisper-base" else "configured stack",
                            artifacts=str(artifacts or st.artifacts_root), keep_audio=keep_audio, store=plain(st.where))
        conds = cond_mod.collect(cfg, concurrency=levels, scenarios=hashes, repeat=repeat, suite=label,
                                 agent=runtime.agent, data_boundary=ledger)
        if zero_cost:
            from .zerocost import mark_conditions
            mark_conditions(conds)
        run_id = st.begin_run(conds, suite=label, command=" ".join(["rejoinder"] + sys.argv[1:]))
        if note:
            st.add_note(run_id, note)
        total = sum(levels) * len(scs) * repeat
        err.print(f"run [bold]{run_id}[/] · {len(scs)} scenario(s) × levels {levels} × {repeat} → {total} calls "
                  f"· store {plain(st.where)}")
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
                                artifacts=artifacts or st.artifacts_root, keep_audio=keep_audio,
                                call_timeout_s=call_timeout, ledger=ledger)
            try:
                status = asyncio.run(run_bench(runtime, scs, st, run_id, opts))
            except KeyboardInterrupt:
                err.print(f"[yellow]interrupted[/]: every finished call of run {run_id} is stored")
                raise typer.Exit(130)
            except RejoinderError as exc:
                _fail(exc)
        show_run(st, run_id, report, json_out)
        err.print(f"stored as run [bold]{run_id}[/] ({status}); "
                  f"`rejoinder report {run_id}{plain(_store_flag(store))}` for the plots")

    @runs.command("list")
    def runs_list(limit: int = typer.Option(20, help="newest N runs"), store: Optional[str] = STORE_OPT,
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
        for h in ("run", "started (UTC)", "status", "agent", "levels", "calls", "ok", "suite"):
            t.add_column(h, no_wrap=h != "suite", overflow="fold")
        for r in rows:
            c = r["conditions"]
            tts = ((c.get("config") or {}).get("stack") or {}).get("tts")
            t.add_row(r["id"], r["started_at"][:16].replace("T", " "), r["status"],
                      f"tts={tts}" if tts else str((c.get("target") or {}).get("url", "")),
                      ",".join(map(str, c.get("concurrency", []))), str(r["n_calls"]), str(r["n_ok"] or 0),
                      str(r.get("suite") or ""))
        out.print(t)

    @runs.command("show")
    def runs_show(run: str = typer.Argument("last", help="run id, unique prefix, or last / last~N"),
                  store: Optional[str] = STORE_OPT, json_out: bool = typer.Option(False, "--json")) -> None:
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
        from .ledger import print_ledger
        print_ledger(out, c.get("data_boundary"))
        for n in info["notes"]:
            out.print(f"note {n['at'][:19]}: {plain(n['text'])}")
        for call in st.calls(info["id"]):
            for f in call["failures"]:
                out.print(f"[red]✗[/] {call['concurrency']} at once · {plain(call['scenario'])}: {plain(f)}")

    @runs.command("search")
    def runs_search(text: str = typer.Argument(..., help='words (all required), or FTS5 syntax: "a phrase", OR, prefix*'),
                    store: Optional[str] = STORE_OPT, limit: int = typer.Option(30),
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
                  store: Optional[str] = STORE_OPT) -> None:
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
                     store: Optional[str] = STORE_OPT, json_out: bool = typer.Option(False, "--json")) -> None:
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
            ts = lv.get("task_success") or {}
            out.print("task success: " + "  vs  ".join(
                f"{k.upper()} {x['ok']}/{x['calls']}" + (f" ({100 * x['rate']:.0f} %)" if x["rate"] is not None else "")
                for k, x in ts.items()))
            out.print("real differences: " + (", ".join(lv["real"]) or "none")
                      + f"  (family-wise 95 % CI excludes 0 and |Δ| ≥ {res['min_ms']:.0f} ms)")

    @runs.command("export")
    def runs_export(refs: Optional[list[str]] = typer.Argument(None, help="runs to export (ids, prefixes, "
                                                               "last, last~N); default: every run"),
                    out_path: Path = typer.Option(Path("-"), "--out", help="file to write (- = stdout)"),
                    store: Optional[str] = STORE_OPT) -> None:
        """Write runs (with their calls, turns, levels and notes) to a JSON Lines file."""
        from .store.transfer import export_runs
        try:
            st = _open(store, must_exist=True)
            if str(out_path) == "-":
                n, calls = export_runs(st, refs or [], sys.stdout)
            else:
                with open(out_path, "w", encoding="utf-8") as fh:
                    n, calls = export_runs(st, refs or [], fh)
        except (RejoinderError, OSError) as exc:
            _fail(exc)
        err.print(f"exported {n} run(s), {calls} call(s) from {st.where}"
                  + ("" if str(out_path) == "-" else f" to {out_path}"), soft_wrap=True, highlight=False)

    @runs.command("import")
    def runs_import(source: Path = typer.Argument(..., help="a file written by `runs export` (- = stdin)"),
                    store: Optional[str] = STORE_OPT) -> None:
        """Add the runs of an export file to this store (runs it already has are skipped)."""
        from .store.transfer import import_runs
        try:
            st = _open(store)
            if str(source) == "-":
                done, skipped = import_runs(st, sys.stdin)
            else:
                with open(source, encoding="utf-8") as fh:
                    done, skipped = import_runs(st, fh)
        except (RejoinderError, OSError) as exc:
            _fail(exc)
        err.print(f"imported {len(done)} run(s) into {st.where}"
                  + (f"; skipped {len(skipped)} already there: {', '.join(skipped)}" if skipped else ""),
                  soft_wrap=True, highlight=False)

    @app.command()
    def report(run: str = typer.Argument("last", help="run id, unique prefix, or last"),
               out_path: Optional[Path] = typer.Option(None, "--out", help="HTML file to write"),
               store: Optional[str] = STORE_OPT) -> None:
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
    """``vad=silero … llm=… tts=…``; an in-process LLM on a user's GGUF is named by its file."""
    names = {k: stack[k] for k in ("vad", "turn", "stt", "llm", "tts") if k in stack}
    gguf = (stack.get("llama") or {}).get("model_path")
    if gguf and names.get("llm") in ("smollm2", "llama"):
        names["llm"] = Path(gguf).name
    return " ".join(f"{k}={v}" for k, v in names.items())

