"""Benchmark: the capacity knee of one agent process — how many calls it holds at once.

Each level runs N simulated calls at once in one fresh process (``--child``), with zero-cost
models (``_zerocost.py``: every model answers at once, so what is measured is the runtime's own
orchestration on the real audio path: frame loops, VAD tracking, turn-taking, the agent loop,
chunking, playout, the simulated callers), or with the real Silero VAD (``--vad silero``) and
zero-cost other models (the caller then says a real recording, 1.6 s: Silero hears no speech in
a tone). Calls start spread over ``--stagger`` seconds; measurement starts when the
last one has started and ends when the first one ends, so all N are live throughout.

Per level it reports **frame age** — how late each 20 ms caller frame was processed after it was
due, on the call's clock (p50/p95/p99/max) — V2V p50/p95 of the turns, CPU (100 % = one core),
RSS, and the **CPU cost per call-frame**: the process's CPU time (frame loops, VAD, turns,
replies, simulated callers) over the call-frames it processed, and the number of calls that
fill one core at that cost (20 000 µs / cost). The cost is what a loaded or shared machine does
not distort; frame age and V2V need the process to get a whole core. The knee is the largest N with frame-age p99 ≤ 20 ms, and the largest N with V2V p95 ≤ 1.5 ×
the single-call p95 of the same code.

``--warm-seconds S`` first runs the level's N calls for S seconds and ends them, then measures N
new calls in the same process: a server that has served calls before, whose memory is already
its own. Without it every level is a fresh process whose calls all start at once, so the window
also pays for first touches of fresh memory (a call's caller-audio ring is 1 MB, touched over its
first 32 s) — on the 2-core reference VM a first touch of a 4 KB page is slow enough to show.
Report both; S ≥ 33 lets the first round's rings be written through.

``--time-ring`` times every caller-audio ring write in the window (mean µs, share over 20 µs: a
first touch of a fresh page).

``--time-frame-path`` times the pacer's ticks in the window (wall time inside
:meth:`rejoinder.pacing.Pacer.tick`: every call's 20 ms frame step, both the agent's and the
simulated caller's; not the cross-call VAD batch, which runs right after each tick as a loop
callback) per call-frame: the frame path's share of the
CPU cost, apart from the turns' and replies' work. Steadier than the process CPU (±3 % between
fresh processes of one build on a quiet box, 2026-12-05), so a change to the frame path is seen
in fewer runs.

``--arms`` compares code versions in one run, level by level, alternating (A1 B1 A10 B10 …), so
both see the same machine load: ``branch`` is this checkout's ``src``; ``main`` is a git worktree
of ``--main-commit`` (default 36d5ede, main of 2026-12-03, made under ``/tmp`` if missing;
d8a83b0, the default until 2026-12-07, predates the harness module the child imports). An arm
with the process's shared pacer (:mod:`rejoinder.pacing`) has the pacer's own frame-age
histogram read; an older one, whose frame loops are per-call ``asyncio.sleep`` timers, is
measured with a probe clock.

    PYTHONPATH=src .venv/bin/python bench/capacity.py [--levels 1,100,250,500,1000]
        [--arms main,branch] [--vad zero|silero] [--seconds 12] [--warm-seconds 0] [--json]

Wall-clock figures: run on a quiet machine; on a shared one the two arms still see the same load.
"""

from __future__ import annotations

import argparse
import array
import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
# real speech for --vad silero: Asterisk prompt "Thank you for your patience" (1.6 s; Allison Smith,
# CC-BY-SA-3.0, Debian's asterisk-core-sounds-en-wav, installed by scripts/setup.sh)
SPEECH = "/usr/share/asterisk/sounds/en/queue-thankyou.wav"


# --- the child: one level in one process ---------------------------------------------------------
def _time_ring_writes() -> dict:
    """``--time-ring``: time every write into a call's caller-audio ring (ns, in the window);
    a first touch of a fresh memory page shows up as a write over 20 µs."""
    from rejoinder.audioring import AudioRing

    stat = {"on": False, "ns": 0, "n": 0, "over_20us": 0}
    write, clock = AudioRing.write, time.perf_counter_ns

    def timed(self, pcm, t_ms):
        t0 = clock()
        write(self, pcm, t_ms)
        if stat["on"]:
            d = clock() - t0
            stat["ns"] += d
            stat["n"] += 1
            stat["over_20us"] += d > 20_000

    AudioRing.write = timed
    return stat


def _time_frame_path() -> dict | None:
    """``--time-frame-path``: wall time (ns) inside the shared pacer's ticks in the window."""
    try:
        from rejoinder import pacing
    except ImportError:  # today's main: per-call timers, no pacer
        return None
    stat = {"on": False, "ns": 0}
    tick, clock = pacing.Pacer.tick, time.perf_counter_ns

    def timed(self, *args, **kwargs):
        if not stat["on"]:
            return tick(self, *args, **kwargs)
        t0 = clock()
        try:
            return tick(self, *args, **kwargs)
        finally:
            stat["ns"] += clock() - t0

    pacing.Pacer.tick = timed
    return stat


def _child(n: int, seconds: float, stagger: float, vad: str, warm_s: float = 0.0,
           time_ring: bool = False, time_frame_path: bool = False) -> dict:
    import gc

    import psutil

    import _zerocost as zc
    from rejoinder.harness.callrun import run_call
    from rejoinder.clock import RealClock

    try:
        from rejoinder import pacing
    except ImportError:  # today's main: per-call timers
        pacing = None
    state = {"measure": False}
    ages = array.array("f")
    ring = _time_ring_writes() if time_ring else None
    path = _time_frame_path() if time_frame_path else None

    class ProbeClock(RealClock):
        """Main's frame loop calls ``pace(t)`` once per frame: record how late it resumed."""

        __slots__ = ()

        async def pace(self, t_ms: float) -> None:
            await self.sleep_until(t_ms)
            if state["measure"]:
                ages.append(self.now_ms() - t_ms)

    make_vad = zc.vad_factory(vad)
    cycle_s = 2.6  # a caller turn and the agent's reply
    speech = None
    if vad == "silero":  # Silero hears no speech in a tone: the caller says a real recording
        from rejoinder.audio_io import load_audio, resample, to_int16
        x, sr = load_audio(SPEECH)
        speech = to_int16(resample(x, sr, 16000))
        cycle_s += len(speech) / 16000 - 0.9
    turns = zc.caller_turns(int((max(seconds, warm_s) + stagger) / cycle_s) + 3, audio=speech)
    agent = zc.agent()
    try:
        from rejoinder.gctune import tune
    except ImportError:  # today's main: CPython's default GC
        tune = None
    if tune is not None:
        tune()  # the branch's GC policy after warm-up (gc.freeze, thresholds)
    proc = psutil.Process()
    results: list = []
    started = [0]
    first_end: list[float] = []
    window: dict = {}

    def begin() -> None:
        state["measure"] = True
        if ring is not None:
            ring["on"] = True
        if path is not None:
            path["on"] = True
        if pacing is not None:
            pacing.shared_pacer().ages.reset()
        window.update(t=time.perf_counter(), cpu=sum(proc.cpu_times()[:2]),
                      gc=[s["collections"] for s in gc.get_stats()])

    def end() -> None:
        if not state["measure"]:
            return
        state["measure"] = False
        if ring is not None:
            ring["on"] = False
            k = max(1, ring["n"])
            window["ring_write"] = {"writes": ring["n"], "mean_us": round(ring["ns"] / 1e3 / k, 2),
                                    "over_20us_pct": round(100.0 * ring["over_20us"] / k, 2)}
        wall = time.perf_counter() - window["t"]
        cpu = sum(proc.cpu_times()[:2]) - window["cpu"]
        frames = pacing.shared_pacer().ages.n if pacing is not None else len(ages)
        if path is not None:
            path["on"] = False
            window["frame_path_us_per_call_frame"] = round(path["ns"] / 1e3 / max(1, frames), 2)
        window.update(wall_s=round(wall, 2), cpu_pct=round(100 * cpu / wall, 1),
                      # CPU per call-frame: all the process's work (frames, turns, replies) over
                      # the call-frames it processed; a loaded machine does not inflate it
                      cpu_us_per_call_frame=round(1e6 * cpu / max(1, frames), 2),
                      calls_per_core=round(20_000.0 / max(1e-9, 1e6 * cpu / max(1, frames))),
                      rss_mb=round(proc.memory_info().rss / 2**20, 1),
                      gc_collections=[s["collections"] - c for s, c in zip(gc.get_stats(), window["gc"])])
        if pacing is not None:
            window["frame_age_ms"] = pacing.shared_pacer().ages.summary()
        else:
            xs = sorted(ages)
            q = lambda p: round(xs[min(len(xs) - 1, int(len(xs) * p / 100))], 3) if xs else None  # noqa: E731
            window["frame_age_ms"] = {"frames": len(xs), "p50": q(50), "p95": q(95), "p99": q(99),
                                      "max": round(xs[-1], 3) if xs else None}

    async def one(i: int) -> None:
        await asyncio.sleep(stagger * i / max(1, n))
        started[0] += 1
        if started[0] == n:
            begin()
        res = await run_call(turns, zc.zero_cost_stack(make_vad()), agent, clock=ProbeClock(),
                             tail_ms=500.0, max_ms=1000.0 * (seconds + stagger + 2 * cycle_s),
                             greeting=False)
        if not first_end:
            first_end.append(time.perf_counter())
            end()
        results.append(res)

    async def warm_one(i: int) -> None:  # --warm-seconds: a round of calls that ends first
        await asyncio.sleep(stagger * i / max(1, n))
        await run_call(turns, zc.zero_cost_stack(make_vad()), agent, clock=ProbeClock(),
                       tail_ms=500.0, max_ms=1000.0 * warm_s, greeting=False)

    async def main() -> None:
        if warm_s > 0:
            await asyncio.gather(*(warm_one(i) for i in range(n)))
            gc.collect()
        await asyncio.gather(*(one(i) for i in range(n)))

    asyncio.run(main())
    v2v = [r.v2v_ms() for res in results for r in res.turns if r.v2v_ms() is not None]
    errors = [res.error for res in results if res.error]
    v2v.sort()
    pct = lambda p: round(v2v[min(len(v2v) - 1, int(len(v2v) * p / 100))], 1) if v2v else None  # noqa: E731
    return {"calls": n, "vad": vad, "warm_s": warm_s, "turns": len(v2v), "errors": len(errors),
            "first_error": errors[0] if errors else None,
            "v2v_ms": {"p50": pct(50), "p95": pct(95)},
            "shared_pacer": pacing is not None, **{k: v for k, v in window.items() if k not in ("t", "cpu", "gc")}}


# --- the parent: levels × arms, alternating --------------------------------------------------------
def main_worktree(commit: str) -> Path:
    path = Path(f"/tmp/rejoinder-main-{commit[:7]}")
    if not (path / "src" / "rejoinder").is_dir():
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(path), commit],
                       check=True, capture_output=True)
    return path


def run_level(src: Path, n: int, a) -> dict:
    env = dict(os.environ, PYTHONPATH=f"{src}{os.pathsep}{HERE}")
    cmd = ["nice", "-n", str(a.nice)] if a.nice else []
    cmd += [sys.executable, str(HERE / "capacity.py"), "--child", str(n), "--seconds", str(a.seconds),
           "--stagger", str(a.stagger), "--vad", a.vad, "--warm-seconds", str(a.warm_seconds)]
    cmd += ["--time-ring"] if a.time_ring else []
    cmd += ["--time-frame-path"] if a.time_frame_path else []
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=a.timeout)
    if out.returncode != 0:
        return {"calls": n, "failed": out.stderr.strip().splitlines()[-1:] or ["?"]}
    return json.loads(out.stdout.strip().splitlines()[-1])


def knees(rows: list[dict], bound_ms: float) -> dict:
    ok = [r for r in rows if "frame_age_ms" in r]
    single = next((r for r in ok if r["calls"] == 1), None)
    base = single["v2v_ms"]["p95"] if single else None
    age_ok = [r["calls"] for r in ok if (r["frame_age_ms"]["p99"] or 1e9) <= bound_ms and not r["errors"]]
    v2v_ok = [r["calls"] for r in ok if base and r["v2v_ms"]["p95"] and r["v2v_ms"]["p95"] <= 1.5 * base]
    return {"frame_age_knee": max(age_ok, default=None), "v2v_knee": max(v2v_ok, default=None),
            "single_call_v2v_p95": base}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--levels", default="1,100,250,500,750,1000")
    ap.add_argument("--arms", default="main,branch")
    ap.add_argument("--main-commit", default="36d5ede")
    ap.add_argument("--vad", choices=["zero", "silero"], default="zero")
    ap.add_argument("--seconds", type=float, default=12.0, help="measured seconds per level")
    ap.add_argument("--stagger", type=float, default=3.0, help="seconds over which calls start")
    ap.add_argument("--warm-seconds", type=float, default=0.0,
                    help="first run the level's N calls this long and end them, then measure N "
                         "new calls: a process that has served calls before (0: a fresh process)")
    ap.add_argument("--time-ring", action="store_true",
                    help="time each caller-audio ring write in the window (adds ≈ 0.2 µs a frame)")
    ap.add_argument("--time-frame-path", action="store_true",
                    help="time the pacer's ticks: the frame path's µs per call-frame")
    ap.add_argument("--bound-ms", type=float, default=20.0, help="frame-age p99 bound")
    ap.add_argument("--timeout", type=float, default=600.0)
    ap.add_argument("--nice", type=int, default=0,
                    help="niceness of the level processes (negative needs root: on a shared "
                         "machine, so that both arms get a core)")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--child", type=int, default=None, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child is not None:
        print(json.dumps(_child(a.child, a.seconds, a.stagger, a.vad, a.warm_seconds, a.time_ring,
                                a.time_frame_path)))
        return
    arms = {}
    for arm in a.arms.split(","):
        arms[arm] = ROOT / "src" if arm == "branch" else main_worktree(a.main_commit) / "src"
    levels = [int(x) for x in a.levels.split(",")]
    rows: dict[str, list[dict]] = {arm: [] for arm in arms}
    for n in levels:
        for arm, src in arms.items():
            r = run_level(src, n, a)
            rows[arm].append(r)
            fa = r.get("frame_age_ms") or {}
            print(f"{arm:>7} N={n:<5} frame age p50/p99/max {fa.get('p50')}/{fa.get('p99')}/"
                  f"{fa.get('max')} ms  V2V p50/p95 {r.get('v2v_ms', {}).get('p50')}/"
                  f"{r.get('v2v_ms', {}).get('p95')} ms  CPU {r.get('cpu_pct')} %  "
                  f"{r.get('cpu_us_per_call_frame')} us/call-frame ({r.get('calls_per_core')} calls "
                  f"fill a core)"
                  f"{'  frame path ' + str(r['frame_path_us_per_call_frame']) + ' us' if 'frame_path_us_per_call_frame' in r else ''}"
                  f"  RSS "
                  f"{r.get('rss_mb')} MB  turns {r.get('turns')} errors {r.get('errors')}"
                  f"{'  FAILED ' + str(r['failed']) if 'failed' in r else ''}", file=sys.stderr)
    out = {"vad": a.vad, "warm_s": a.warm_seconds, "levels": levels, "seconds": a.seconds, "arms": rows,
           "knees": {arm: knees(rs, a.bound_ms) for arm, rs in rows.items()},
           "cores": os.cpu_count()}
    if a.json:
        print(json.dumps(out, indent=2))
    else:
        for arm, k in out["knees"].items():
            print(f"{arm}: largest N with frame-age p99 <= {a.bound_ms:g} ms: {k['frame_age_knee']}; "
                  f"with V2V p95 <= 1.5 x single-call ({k['single_call_v2v_p95']} ms): {k['v2v_knee']}")


if __name__ == "__main__":
    main()
