"""Loop-stall attribution: what made a slow turn slow (pure logic, scripted stalls)."""

from __future__ import annotations

import asyncio
import time

from rejoinder.stalls import LoopWatch, Stall, TurnWindow, attribute, classify

SEGS = {"endpointing": 300.0, "transcription": 150.0, "llm_ttft": 150.0, "tts_ttfb": 100.0}


def turns(n: int = 100, *, slow: dict[int, dict] | None = None) -> list[TurnWindow]:
    """``n`` turns of 700 ms, one every 2 s; ``slow`` adds ms to segments of some turns."""
    out = []
    for i in range(n):
        segs = dict(SEGS)
        for k, v in (slow or {}).get(i, {}).items():
            segs[k] += v
        v2v = sum(segs.values())
        out.append(TurnWindow("c1", i + 1, 2.0 * i, 2.0 * i + v2v / 1000.0, v2v, segs))
    return out


def test_classify() -> None:
    idle = ["base_events.py:1909 _run_once", "selectors.py:468 select"]
    busy = ["session.py:150 on_frame", "tools.py:80 run", "time.py:1 sleep"]
    assert classify(0.1, idle, in_gc=False) == "starvation"
    assert classify(0.9, busy, in_gc=False) == "blocking"
    assert classify(0.05, busy, in_gc=False) == "blocking"  # blocked in a call, not idle
    assert classify(0.9, busy, in_gc=True) == "gc"


def test_slow_turns_get_the_cause_that_covers_their_excess() -> None:
    ts = turns(slow={5: {"llm_ttft": 400.0}, 10: {"endpointing": 300.0}, 20: {"tts_ttfb": 350.0}})
    t10, t20 = ts[10], ts[20]
    stalls = [Stall(t10.start + 0.1, t10.start + 0.35, "blocking", ["tools.py:80 lookup", "time.py sleep"]),
              Stall(t20.start + 0.05, t20.start + 0.30, "starvation")]
    out = {r["turn_id"]: r for r in attribute(ts, stalls, gc_pauses=[(ts[30].start + 0.1, 60.0)])}
    assert set(out) == {6, 11, 21}  # above the p95: the three slowed turns only
    assert out[6]["cause"] == "model" and out[6]["segment"] == "llm_ttft"
    assert out[6]["segment_excess_ms"] == 400.0
    assert out[11]["cause"] == "blocking" and out[11]["stack"][0] == "tools.py:80 lookup"
    assert out[11]["stall_ms"] == {"blocking": 250.0}
    assert out[21]["cause"] == "starvation"


def test_gc_pauses_count_where_no_episode_covers_them() -> None:
    ts = turns(slow={7: {"transcription": 200.0}})
    t = ts[7]
    out = attribute(ts, [], gc_pauses=[(t.start + 0.2, 180.0)])
    assert [(r["turn_id"], r["cause"]) for r in out] == [(8, "gc")]
    assert out[0]["stall_ms"] == {"gc": 180.0}
    # a small pause does not explain a large excess: the model is blamed
    out = attribute(ts, [], gc_pauses=[(t.start + 0.2, 20.0)])
    assert out[0]["cause"] == "model" and out[0]["segment"] == "transcription"


async def test_the_watchdog_sees_a_blocking_call_and_its_stack() -> None:
    watch = LoopWatch(lag_ms=30.0, interval_ms=5.0)
    watch.start()
    await asyncio.sleep(0.05)

    def blocking_lookup() -> None:
        time.sleep(0.25)  # a plain function called on the event loop
    blocking_lookup()
    await asyncio.sleep(0.1)
    stalls = watch.stop()
    long = [s for s in stalls if s.ms >= 150]
    assert long, stalls
    assert long[0].cause == "blocking"
    assert any("blocking_lookup" in f for f in long[0].stack)
