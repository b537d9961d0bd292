"""Concurrency sweeps: N simulated callers at once against one agent process.

At concurrency level N, N workers run side by side as asyncio tasks in this process, sharing the
loaded models (the "one agent process" hosting arrangement). Worker *w* plays the suite's
scenarios ``repeat`` times, starting at scenario *w* so that different scripts overlap, hence
the load stays at N calls for the whole level. Each call is evaluated against its scenario and
written to the run store the moment it ends (a killed sweep keeps every finished call).

Overload must show up as degraded numbers, not crashes: a call that raises or exceeds
``call_timeout_s`` is recorded as a failed call with its reason, and the sweep goes on.

While a level runs, :class:`Monitor` samples this process's CPU time and RSS (psutil) and the
event loop's lag (how late a 100 ms timer fires). A lagging loop delays the simulated callers'
frames too, so the lag is reported next to the latencies: when it is large the measurement
itself is distorted.
"""

from __future__ import annotations

import asyncio
import shutil
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Protocol

import psutil

from .. import gctune
from .._threads import FITS
from .caller import RenderedTurn, render_turns
from ..scenario import Scenario
from ..stalls import LoopWatch, TurnWindow, attribute, summarize
from ..timeline import sum_reported, transcript_text
from .answers import small_talk_counts
from .expect import evaluate
from .stats import percentiles
from .store import RunStore, now_iso
from .suite import scenario_hash


class AgentLike(Protocol):
    async def warmup(self) -> None: ...

    async def call(self, turns: list[RenderedTurn], **kw: Any) -> Any: ...


class Monitor:
    """CPU time, RSS and event-loop lag of this process over one level."""

    def __init__(self, interval_s: float = 0.1) -> None:
        self.proc = psutil.Process()
        self.interval = interval_s
        self.lags: list[float] = []
        self.rss_peak = 0
        self._task: asyncio.Task | None = None

    def start(self) -> None:
        self.wall0 = time.perf_counter()
        self.cpu0 = self.proc.cpu_times()
        self.sys0 = psutil.cpu_times()
        self.rss0 = self.proc.memory_info().rss
        self.rss_peak = self.rss0
        self.fits0 = FITS.snapshot()
        self._task = asyncio.get_running_loop().create_task(self._sample())

    async def _sample(self) -> None:
        while True:
            t = time.perf_counter()
            await asyncio.sleep(self.interval)
            self.lags.append(1000.0 * (time.perf_counter() - t - self.interval))
            self.rss_peak = max(self.rss_peak, self.proc.memory_info().rss)

    async def stop(self) -> dict[str, Any]:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        wall = time.perf_counter() - self.wall0
        cpu1, sys1 = self.proc.cpu_times(), psutil.cpu_times()
        cpu = (cpu1.user - self.cpu0.user) + (cpu1.system - self.cpu0.system)
        busy = lambda c: c.user + c.system + getattr(c, "nice", 0.0) + getattr(c, "irq", 0.0) \
            + getattr(c, "softirq", 0.0)  # noqa: E731
        total = lambda c: busy(c) + c.idle + getattr(c, "iowait", 0.0) + getattr(c, "steal", 0.0)  # noqa: E731
        dt = total(sys1) - total(self.sys0)
        self.rss_peak = max(self.rss_peak, self.proc.memory_info().rss)
        return {
            "wall_s": round(wall, 3),
            "cpu_s": round(cpu, 3),
            "cpu_pct": round(100.0 * cpu / wall, 1) if wall > 0 else None,  # 100 = one core
            "cores": psutil.cpu_count(),
            "machine_busy_pct": round(100.0 * (busy(sys1) - busy(self.sys0)) / dt, 1) if dt > 0 else None,
            "rss_start_mb": round(self.rss0 / 2**20, 1),
            "rss_peak_mb": round(self.rss_peak / 2**20, 1),
            "loop_lag_ms": {**percentiles(self.lags), "max": round(max(self.lags), 3) if self.lags else None},
            **llm_thread_shares(self.fits0, FITS.snapshot()),
        }


def llm_thread_shares(before: tuple[int, int, int], after: tuple[int, int, int]) -> dict[str, Any]:
    """This process's llama.cpp steps between two :meth:`rejoinder._threads.ThreadFits.snapshot`
    readings, and the % of them run with threads shed for other processes' load
    (``llm_shed_pct``) or with a thread given up to Piper (``llm_yield_pct``); the shares are
    None where no step ran here (a remote or other-process LLM)."""
    steps, shed, yielded = (a - b for a, b in zip(after, before))
    pct = (lambda n: round(100.0 * n / steps, 1) if steps else None)  # noqa: E731
    return {"llm_steps": steps, "llm_shed_pct": pct(shed), "llm_yield_pct": pct(yielded)}


@dataclass
class Job:
    scenario: Scenario
    turns: list[RenderedTurn]
    concurrency: int
    worker: int
    round: int


@dataclass
class BenchOptions:
    levels: list[int]
    repeat: int = 1
    artifacts: Path | None = None      # per-call timeline/transcript folders (None: keep nothing)
    keep_audio: bool = False            # keep each call's stereo call.wav
    call_timeout_s: float = 600.0
    on_call: Callable[[dict[str, Any]], None] | None = None   # progress callback (call record)
    on_level: Callable[[int, dict[str, Any]], None] | None = None
    hashes: dict[str, str] = field(default_factory=dict)
    processes: dict[str, int] = field(default_factory=dict)  # other processes to sample (name → pid)
    ledger: dict[str, Any] | None = None  # the run's data-boundary ledger (rejoinder.harness.ledger)


def ear_check(turns: list, onsets: list[float]) -> list[float | None]:
    """Per turn: |first voiced agent sample the caller heard − stamped ``playback_start``| (ms)."""
    out: list[float | None] = []
    for r in turns:
        pb = r.stamps.get("playback_start")
        if pb is None or not onsets:
            out.append(None)
            continue
        out.append(round(min(abs(o - pb) for o in onsets), 3))
    return out


async def run_one(agent: AgentLike, job: Job, run_id: str, store: RunStore, opts: BenchOptions,
                  t0: float) -> dict[str, Any]:
    """One call: play it, evaluate it, store it. Never raises for a failed call."""
    sc = job.scenario
    call_id = f"{job.concurrency}-{job.worker}-{job.round}-{sc.name}-{uuid.uuid4().hex[:6]}"
    out_dir = opts.artifacts / run_id / call_id if opts.artifacts else None
    if out_dir:
        out_dir.mkdir(parents=True, exist_ok=True)
    started_at, offset_ms = now_iso(), 1000.0 * (time.perf_counter() - t0)
    rec: dict[str, Any] = {"id": call_id, "scenario": sc.name, "scenario_hash": opts.hashes.get(sc.name),
                           "concurrency": job.concurrency, "worker": job.worker, "round": job.round,
                           "started_at": started_at, "offset_ms": round(offset_ms, 1),
                           "artifacts": str(out_dir) if out_dir else None}
    turns: list[dict[str, Any]] = []
    try:
        res = await asyncio.wait_for(
            agent.call(job.turns, out_dir=out_dir, caller_phone=sc.caller_phone, tail_ms=sc.tail_ms,
                       call_id=call_id, turn_policy=sc.turn_policy), opts.call_timeout_s)
        caller = res.caller
        truth = caller.truth if caller else []
        verdict = evaluate(sc, res, truth, caller.cues if caller else [], owned=getattr(res, "owners", None),
                           observable=getattr(res, "observable", None))
        ears = ear_check(res.turns, caller.heard_onsets if caller else [])
        for r, ear in zip(res.turns, ears):
            s = r.summary()
            s["caller_turn"] = verdict.owners.get(r.turn_id)
            s["ear_check_ms"] = ear
            turns.append(s)
        rec.update(duration_ms=round(res.duration_ms, 1), caller_cpu_s=round(res.caller_cpu_s, 4),
                   success=verdict.success, checks=verdict.checks, failures=verdict.failures,
                   error=res.error, transcript=transcript_text(res.transcript),
                   extra={"cues": caller.cues if caller else [], "causes": verdict.causes,
                          "truth": [list(t) for t in truth],
                          "ear_check_max_ms": max((e for e in ears if e is not None), default=None),
                          "control": res.control_metrics(),
                          "turn_taking": res.turn_taking_metrics(),
                          "clock_origin_s": getattr(res, "clock_origin_s", None)})
        for key, fn in (("endpointing", "endpointing_metrics"), ("silence", "silence_metrics"),
                        ("speculation", "speculation_metrics")):  # a remote agent may lack some
            value = getattr(res, fn)() if hasattr(res, fn) else None
            if value is not None:
                rec["extra"][key] = value
        if (server := sum_reported(t.get("llm_server") for t in turns)):
            rec["extra"]["llm_server"] = server  # what the LLM server reported, over the call
        if verdict.skipped:
            rec["extra"]["skipped_checks"] = verdict.skipped
        if (talk := small_talk_counts(sc, verdict.failures, verdict.skipped)) is not None:
            rec["extra"]["small_talk"] = talk  # tool calls on small talk (no_tools turns)
        if opts.ledger is not None:  # what crossed each data boundary in this call
            from .ledger import call_ledger
            rec["extra"]["ledger"] = call_ledger(opts.ledger, turns, recorded=bool(out_dir and opts.keep_audio))
        if getattr(res, "target", None):  # a remote agent: what it said about this call
            rec["extra"]["target"] = res.target
    except Exception as exc:  # noqa: BLE001 — overload and crashes become data, not a dead sweep
        reason = "timed out" if isinstance(exc, (asyncio.TimeoutError, TimeoutError)) else repr(exc)
        rec.update(duration_ms=round(1000.0 * (time.perf_counter() - t0) - offset_ms, 1), caller_cpu_s=None,
                   success=False, checks=1, failures=[f"the call did not complete: {reason}"],
                   error=reason, transcript="", extra={})
    if out_dir and not opts.keep_audio:
        (out_dir / "call.wav").unlink(missing_ok=True)
    store.add_call(run_id, rec, turns)
    rec["turns"] = turns
    if opts.on_call:
        opts.on_call(rec)
    return rec


async def run_level(agent: AgentLike, scenarios: list[Scenario], rendered: dict[str, list[RenderedTurn]],
                    level: int, run_id: str, store: RunStore, opts: BenchOptions) -> dict[str, Any]:
    """Run one concurrency level; returns its resource statistics (also stored)."""
    mon = Monitor()
    mon.start()
    sampler = None
    if opts.processes:  # model servers and the network emulator: their CPU and RSS too
        from ..hosting.servers import ProcessSampler
        sampler = ProcessSampler(opts.processes)
        sampler.start()
    t0 = time.perf_counter()
    caller_cpu: list[float] = []
    watch = LoopWatch()  # loop stalls: GC, blocking calls, CPU starvation (rejoinder.stalls)
    watch.start()
    done: list[dict[str, Any]] = []

    async def worker(w: int) -> None:
        for rnd in range(opts.repeat):
            for k in range(len(scenarios)):
                sc = scenarios[(k + w) % len(scenarios)]
                rec = await run_one(agent, Job(sc, rendered[sc.name], level, w, rnd), run_id, store, opts, t0)
                done.append(rec)
                if rec.get("caller_cpu_s") is not None:
                    caller_cpu.append(rec["caller_cpu_s"])

    try:
        async with asyncio.TaskGroup() as tg:
            for w in range(level):
                tg.create_task(worker(w))
    finally:
        stats = await mon.stop()
        stalls = watch.stop()
        stats["loop_stalls"] = summarize(stalls)
        stats["slow_turns"] = attribute(turn_windows(done), stalls, gc_pauses_since(t0))
        if sampler is not None:
            stats["processes"] = await sampler.stop()
        stats["caller_cpu_s"] = round(sum(caller_cpu), 4)
        stats["caller_cpu_share"] = round(sum(caller_cpu) / stats["cpu_s"], 5) if stats["cpu_s"] > 0 else None
        stats["calls"] = level * opts.repeat * len(scenarios)
        store.add_level(run_id, level, stats)
    if opts.on_level:
        opts.on_level(level, stats)
    return stats


def turn_windows(recs: list[dict[str, Any]]) -> list[TurnWindow]:
    """The measured turns of ``recs`` on the process clock (calls whose clock is real)."""
    out = []
    for rec in recs:
        origin = (rec.get("extra") or {}).get("clock_origin_s")
        for t in rec.get("turns", []):
            b = t.get("boundaries", {})
            if origin is None or t.get("v2v_ms") is None or "user_speech_end" not in b:
                continue
            out.append(TurnWindow(rec["id"], t["turn_id"], origin + b["user_speech_end"] / 1000.0,
                                  origin + b["playback_start"] / 1000.0, t["v2v_ms"], t.get("segments", {})))
    return out


def gc_pauses_since(t0: float) -> list[tuple[float, float]]:
    return [(s, ms) for s, ms, _ in gctune.PAUSES if s >= t0]


async def render_all(scenarios: list[Scenario], caller_tts=None) -> dict[str, list[RenderedTurn]]:
    """Render every scenario's caller audio once (shared, read-only, by all calls)."""
    return {sc.name: await render_turns(sc, caller_tts) for sc in scenarios}


async def run_bench(agent: AgentLike, scenarios: list[Scenario], store: RunStore, run_id: str,
                    opts: BenchOptions, *, caller_tts=None) -> str:
    """Warm the agent, then run every level in order; marks the run finished/failed/cancelled."""
    status = "failed"
    try:
        await agent.warmup()
        rendered = await render_all(scenarios, caller_tts)
        opts.hashes = opts.hashes or {sc.name: scenario_hash(sc) for sc in scenarios}
        for level in opts.levels:
            await run_level(agent, scenarios, rendered, level, run_id, store, opts)
        status = "finished"
    except (asyncio.CancelledError, KeyboardInterrupt):
        status = "cancelled"
        raise
    finally:
        from .summary import run_summary
        store.finish_run(run_id, status, run_summary(store, run_id))
    return status


def clean_artifacts(root: Path, run_id: str) -> None:
    shutil.rmtree(root / run_id, ignore_errors=True)
