"""Benchmark: voice-to-voice latency of the bundled real-speech call at concurrency 1.

Runs the call ``--runs`` times (default 10) in one agent process on the embedded stack and
prints V2V p50/p95, each critical-path segment's median, and the process's peak RSS.

    .venv/bin/python bench/v2v.py [--runs 10] [--tts piper|espeak] [--json]

Targets (issue "A voice agent that answers a real recorded caller"): V2V p50 ≤ 1000 ms,
p95 ≤ 1500 ms, RSS ≤ 1.5 GB. Percentiles are nearest-rank over all turns of all runs.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
from pathlib import Path

import psutil

from rejoinder.agent import Agent, load_caller
from rejoinder.cli import BUNDLED_CALL
from rejoinder.config import AgentConfig


def pct(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100)."""
    s = sorted(values)
    k = max(0, min(len(s) - 1, int(-(-q * len(s) // 100)) - 1))
    return s[k]


async def main(runs: int, tts: str | None) -> dict:
    cfg = AgentConfig()
    if tts:
        cfg.stack.tts = tts
    agent = Agent(cfg)
    await agent.warmup()
    turns, phone, sc = await load_caller(BUNDLED_CALL)
    proc = psutil.Process()
    v2v: list[float] = []
    segs: dict[str, list[float]] = {}
    peak_rss = 0
    unmeasured = 0
    for i in range(runs):
        res = await agent.call(turns, caller_phone=phone, tail_ms=sc.tail_ms)
        for r in res.turns:
            if r.v2v_ms() is None:
                unmeasured += 1
                continue
            v2v.append(r.v2v_ms())
            for k, v in r.segments().items():
                segs.setdefault(k, []).append(v)
        peak_rss = max(peak_rss, proc.memory_info().rss)
        print(f"run {i + 1}/{runs}: " + ", ".join(f"{r.v2v_ms():.0f}" if r.v2v_ms() else r.status
                                                for r in res.turns), file=sys.stderr)
    return {
        "runs": runs, "turns": len(v2v), "unmeasured_turns": unmeasured, "concurrency": 1,
        "tts": cfg.stack.tts,
        "v2v_ms": {"p50": pct(v2v, 50), "p95": pct(v2v, 95), "mean": statistics.fmean(v2v)},
        "segment_median_ms": {k: statistics.median(v) for k, v in segs.items()},
        "rss_peak_mb": round(peak_rss / 2**20, 1),
    }


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--tts", default=None)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    out = asyncio.run(main(a.runs, a.tts))
    if a.json:
        print(json.dumps(out, indent=2))
    else:
        print(f"V2V over {out['turns']} turns of {out['runs']} runs (concurrency 1, tts={out['tts']}): "
              f"p50 {out['v2v_ms']['p50']:.0f} ms, p95 {out['v2v_ms']['p95']:.0f} ms; "
              f"peak RSS {out['rss_peak_mb']:.0f} MB")
        for k, v in out["segment_median_ms"].items():
            print(f"  {k:14s} median {v:7.1f} ms")
