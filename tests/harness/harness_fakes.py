"""Fakes for the harness tests: synthetic stored runs with known distributions, and an agent that
runs real sessions on virtual clocks with the scripted ports of ``tests/fakes.py``."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import soundfile as sf

from fakes import (AmplitudeVAD, ScriptedLLM, ScriptedSTT, ScriptedTurn, ToneTTS, lookup, scripted_agent,
                   tone)
from rejoinder.harness.callrun import run_call
from rejoinder.clock import VirtualClock
from rejoinder.session import Stack


def conditions(tts: str) -> dict:
    return {"config": {"stack": {"tts": tts, "stt": "whisper-base"}, "hosting": "embedded-cpu"},
            "hosting": "embedded-cpu", "network": "loopback", "concurrency": [1, 2],
            "machine": {"cpu_model": "test cpu", "cores_logical": 2}, "code": {"commit": "abc", "dirty": False}}


def synthetic_run(store, *, tts: str, seed: int, tts_shift_ms: float = 0.0, levels=(1, 2),
                  calls_per_worker: int = 6, crash_after: int | None = None, queue_ms: float = 25.0) -> str:
    """A stored run whose segments follow known normal distributions; only ``tts_ttfb`` moves
    with ``tts_shift_ms``. Each level adds ``queue_ms`` of queueing to the endpointing segment."""
    rng = np.random.default_rng(seed)
    run_id = store.begin_run(conditions(tts), suite="synthetic", command="test")
    written = 0
    for n in levels:
        for k in range(n * calls_per_worker):
            if crash_after is not None and written == crash_after:
                return run_id
            scenario = ("order-lookup", "reschedule")[k % 2]
            turns = []
            for t in range(1, 4):
                segs = {"endpointing": max(0.0, rng.normal(300 + queue_ms * (n - 1), 40)),
                        "transcription": max(0.0, rng.normal(120, 20)),
                        "first_text": max(0.0, rng.normal(5, 1)),
                        "tts_ttfb": max(0.0, rng.normal(150 + tts_shift_ms, 25)),
                        "audio_out": 1.0,
                        "playout": max(0.0, rng.normal(60, 10))}
                if t == 2:
                    segs["tools"] = 2.0
                segs = {s: round(v, 3) for s, v in segs.items()}
                stalls = [{"start_ms": 1000.0, "duration_ms": 40.0}] if rng.random() < 0.1 else []
                turns.append({"turn_id": t, "status": "completed", "v2v_ms": round(sum(segs.values()), 3),
                              "segments": segs, "boundaries": {"user_speech_end": 1000.0 * t},
                              "stalls": stalls, "tools": [], "transcript": f"turn {t} of {scenario}",
                              "heard_text": "Order 4217 has shipped", "caller_turn": t - 1})
            ok = scenario == "order-lookup" or k % 4 != 1
            store.add_call(run_id, {"id": f"{run_id}-{n}-{k}", "scenario": scenario, "concurrency": n,
                                    "success": ok, "checks": 3,
                                    "failures": [] if ok else ["final_db: appointments 101 has {'slot': 'x'}"],
                                    "transcript": f"caller: move my haircut\nagent: done ({tts})",
                                    "caller_cpu_s": 0.01, "duration_ms": 9000.0}, turns)
            written += 1
        store.add_level(run_id, n, {"wall_s": 30.0, "cpu_s": 12.0 * n, "cpu_pct": 40.0 * n,
                                    "rss_peak_mb": 700.0, "caller_cpu_s": 0.01 * n,
                                    "caller_cpu_share": 0.001, "loop_lag_ms": {"p99": 3.0}})
    from rejoinder.harness.summary import run_summary
    store.finish_run(run_id, "finished", run_summary(store, run_id))
    return run_id


def write_tone(path: Path, ms: float = 800.0) -> Path:
    sf.write(str(path), tone(ms), 16000, subtype="PCM_16")
    return path


TONE_SCENARIO = """\
name: {name}
caller_phone: "+15550101"
turns:
  - audio:
      - file: tone.wav
    expect:
      tools:
        - name: lookup_order
          args: {{order_id: "4217"}}
      reply_contains: ["4217"]
      v2v_budget_ms: {budget}
  - after_agent_ms: 400
    audio:
      - file: tone.wav
tail_ms: 800
"""


def tone_suite(folder: Path, names=("alpha", "beta"), budget: float = 5000) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    write_tone(folder / "tone.wav")
    for n in names:
        (folder / f"{n}.yaml").write_text(TONE_SCENARIO.format(name=n, budget=budget))
    return folder


class FakeAgent:
    """Real sessions and simulated callers on virtual clocks (instant), scripted ports."""

    def __init__(self, fail_on: tuple[str, ...] = ()) -> None:
        self.fail_on = fail_on
        self.warmed = 0
        self.calls = 0

    async def warmup(self) -> None:
        self.warmed += 1

    async def call(self, turns, *, out_dir=None, caller_phone=None, tail_ms=2500.0, call_id=None, **kw):
        self.calls += 1
        if any(name in (call_id or "") for name in self.fail_on):
            raise RuntimeError("model server went away")
        clock = VirtualClock()
        stack = Stack(vad=AmplitudeVAD(), turn=ScriptedTurn(clock), stt=ScriptedSTT(clock, ["Check order 4217."]),
                      llm=ScriptedLLM(clock, ["Order", " 4217", " has", " shipped."], calls=lookup()),
                      tts=ToneTTS(clock))
        return await run_call(turns, stack, scripted_agent(), out_dir=out_dir, clock=clock,
                              call_id=call_id, tail_ms=tail_ms)
