"""Benchmark: voice-to-voice latency (V2V) and time to answer of the bundled real-speech call,
with the LLM writing every reply, one call at a time.

Runs the call ``--runs`` times (default 10) in one process on the embedded stack with the
LLM-driven reference support agent (or ``--agent``) and prints, over all caller turns of all runs:
V2V and time to answer p50/p95 (nearest rank), each critical-path segment's median contribution,
the LLM's TTFT median, how often the expected tool was called, and the process's peak RSS; and,
against the caller's own audio, the endpointing delay p50/p95 and false cut-offs (the turn
decided over while the caller went on within 1 s; rejoinder.callmetrics), what speculation
bought and cost (hit rate, ms saved p50, LLM calls per turn; rejoinder.speculation) and the
longest silence the caller heard per turn (p95, all turns and tool turns).

    .venv/bin/python bench/v2v.py [--runs 10] [--agent SPEC] [--tts piper|espeak]
                                  [--llm smollm2|openai] [--config YAML] [--json]

Goal (issue 8): V2V p50 ≤ 800 ms and p95 ≤ 1200 ms on a 2-core CPU with the embedded models.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys

import psutil

from rejoinder.cli import BUNDLED_CALL
from rejoinder.config import load_config
from rejoinder.harness.eotsummary import eot_summary
from rejoinder.harness.expect import evaluate
from rejoinder.harness.stats import percentiles
from rejoinder.runtime import Runtime, load_caller


async def main(runs: int, agent: str | None, tts: str | None, llm: str | None,
               config: str | None = None) -> dict:
    runtime = Runtime(load_config(config, agent=agent, tts=tts, llm=llm))
    await runtime.warmup()
    turns, phone, sc = await load_caller(BUNDLED_CALL)
    proc = psutil.Process()
    v2v: list[float] = []
    tta: list[float] = []
    ttft: list[float] = []
    segs: dict[str, list[float]] = {}
    peak_rss = 0
    unmeasured = 0
    ok = 0
    causes: dict[str, int] = {}
    calls: list[dict] = []
    for i in range(runs):
        res = await runtime.call(turns, caller_phone=phone, tail_ms=sc.tail_ms)
        calls.append({"extra": {"endpointing": res.endpointing_metrics(),
                                "speculation": res.speculation_metrics(),
                                "silence": res.silence_metrics()}})
        verdict = evaluate(sc, res, res.caller.truth, res.caller.cues)
        ok += verdict.success
        for c in verdict.causes:
            causes[c] = causes.get(c, 0) + 1
        for r in res.turns:
            if r.v2v_ms() is None:
                unmeasured += 1
                continue
            v2v.append(r.v2v_ms())
            if r.time_to_answer_ms() is not None:
                tta.append(r.time_to_answer_ms())
            s = r.stamps
            if "llm_request" in s and r.llm_first_tokens:
                ttft.append(r.llm_first_tokens[-1] - s["llm_request"])
            for k, v in r.segments().items():
                segs.setdefault(k, []).append(v)
        peak_rss = max(peak_rss, proc.memory_info().rss)
        print(f"run {i + 1}/{runs}: " + " | ".join(
            f"{r.transcript!r} → {r.heard_text!r} {r.v2v_ms():.0f} ms" if r.v2v_ms() else
            f"{r.transcript!r} → ({r.status})" for r in res.turns), file=sys.stderr)
    n_turns = len(v2v)
    return {
        "runs": runs, "turns": n_turns, "unmeasured_turns": unmeasured, "concurrency": 1,
        "agent": runtime.agent.name, "tts": runtime.cfg.stack.tts, "llm": runtime.cfg.stack.llm,
        "v2v_ms": percentiles(v2v), "time_to_answer_ms": percentiles(tta),
        "llm_ttft_median_ms": statistics.median(ttft) if ttft else None,
        "segment_median_ms": {k: statistics.median(v + [0.0] * (n_turns - len(v)))
                              for k, v in segs.items()},
        "task_success": f"{ok}/{runs}", "failure_causes": causes,
        "rss_peak_mb": round(peak_rss / 2**20, 1),
        **eot_summary(calls),
    }


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--agent", default=None)
    ap.add_argument("--tts", default=None)
    ap.add_argument("--llm", default=None)
    ap.add_argument("--config", default=None, help="a runtime config YAML (e.g. stack.llama.n_threads)")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    out = asyncio.run(main(a.runs, a.agent, a.tts, a.llm, a.config))
    if a.json:
        print(json.dumps(out, indent=2))
    else:
        v, t = out["v2v_ms"], out["time_to_answer_ms"]
        print(f"{out['turns']} turns of {out['runs']} runs, concurrency 1, agent {out['agent']}, "
              f"llm {out['llm']}, tts {out['tts']}")
        print(f"  V2V            p50 {v['p50']:.0f} ms  p95 {v['p95']:.0f} ms")
        print(f"  time to answer p50 {t['p50']:.0f} ms  p95 {t['p95']:.0f} ms")
        print(f"  LLM TTFT median {out['llm_ttft_median_ms']} ms; task success {out['task_success']} "
              f"{out['failure_causes'] or ''}; peak RSS {out['rss_peak_mb']:.0f} MB")
        for k, val in out["segment_median_ms"].items():
            print(f"  {k:14s} median {val:7.1f} ms")
        ep, sp, si = out["endpointing"], out["speculation"], out["silence"]
        print(f"  endpointing delay p50 {ep['delay_ms']['p50']} ms p95 {ep['delay_ms']['p95']} ms; "
              f"false cut-offs {ep['false_cutoffs']}/{ep['utterances']} utterances "
              f"({ep['false_cutoffs_in_numbers']} inside numbers)")
        print(f"  speculation: {sp['speculative']} drafts, hit rate {sp['hit_rate']}, saved p50 "
              f"{sp['saved_ms']['p50']} ms; LLM calls per turn {sp['llm_calls_per_turn']} "
              f"(wasted {sp['wasted_llm_calls_per_turn']}), replies started per turn "
              f"{sp.get('llm_replies_per_turn')}; unconfirmed words {sp['unconfirmed_words']}")
        print(f"  longest silence p95 {si['longest_silence_ms']['p95']} ms, tool turns "
              f"{si['tool_turns_longest_silence_ms']['p95']} ms (n {si['tool_turns_longest_silence_ms']['n']})")
