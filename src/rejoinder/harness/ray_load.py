"""Distributed simulated callers: ``rejoinder bench --ray ADDRESS`` runs a level's callers on
Ray actors (one asyncio actor per CPU of the cluster, one process each) instead of as tasks of
this process.

Every actor builds its own agent once — the in-process :class:`~rejoinder.runtime.Runtime`
(its own models), the zero-cost runtime (:mod:`.zerocost`), or a
:class:`~rejoinder.harness.remote.target.RemoteTarget` (a ``serve`` deployment or any socket) —
and plays its share of the level's callers with the same code as one process
(:func:`rejoinder.harness.bench.run_one`): caller *w* of level *N* runs on actor ``w mod A`` and
plays the suite starting at scenario *w*, exactly as worker *w* does in one process. All actors
start a level at the same wall-clock moment.

Merging is exact: each actor returns its calls with every turn's raw boundaries and segments
(the run store keeps raw samples, and every percentile is computed from them), and its raw
event-loop lag samples; the driver writes the calls to the store and pools the samples. No
percentile is ever averaged. Artifacts (timelines, recordings) stay off: actors may run on
other machines.
"""

from __future__ import annotations

import asyncio
import os
import socket
import time
from typing import Any

from .bench import BenchOptions, Job, Monitor, render_all, run_one
from .stats import percentiles
from .store import RunStore

START_AHEAD_S = 1.0  # a level starts this long after it is handed out, on every actor at once


class _Collect:
    """The store interface ``run_one`` writes to, on an actor: keeps the calls to return."""

    def __init__(self) -> None:
        self.calls: list[tuple[dict[str, Any], list[dict[str, Any]]]] = []

    def add_call(self, run_id: str, rec: dict[str, Any], turns: list[dict[str, Any]]) -> None:
        self.calls.append((dict(rec), turns))


def build_agent(spec: dict[str, Any]) -> Any:
    """The agent an actor calls, from a picklable spec: ``{"kind": "runtime", "cfg": {...},
    "zero_cost": bool}`` or ``{"kind": "target", "target": {...TargetSpec fields}, "token": …}``.

    Raises:
        ConfigError: a configuration that does not validate.
    """
    if spec["kind"] == "target":
        from .remote.target import RemoteTarget, TargetSpec
        return RemoteTarget(TargetSpec(**spec["target"], token=spec.get("token")))
    from ..config import AgentConfig
    cfg = AgentConfig.model_validate(spec["cfg"])
    if spec.get("zero_cost"):
        from .zerocost import ZeroCostRuntime
        return ZeroCostRuntime(cfg)
    from ..runtime import Runtime
    return Runtime(cfg)


class CallerWorker:
    """One Ray actor (an asyncio event loop in its own process): an agent, and the callers of
    each level assigned to it. Decorated with ``ray.remote`` by :func:`start_workers`."""

    def __init__(self, spec: dict[str, Any], index: int) -> None:
        self.spec, self.index = spec, index
        self.agent = build_agent(spec)

    async def warmup(self) -> dict[str, Any]:
        """Load the agent's models; returns where this actor runs (node, pid, rejoinder version)."""
        from importlib import metadata
        t0 = time.perf_counter()
        await self.agent.warmup()
        try:
            version = metadata.version("rejoinder")
        except metadata.PackageNotFoundError:
            version = None
        return {"worker": self.index, "host": socket.gethostname(), "pid": os.getpid(), "rejoinder": version,
                "warmup_ms": round(1000.0 * (time.perf_counter() - t0), 1)}

    async def run_level(self, scenarios: list, rendered: dict, level: int, workers: list[int], repeat: int,
                        call_timeout_s: float, hashes: dict[str, str], run_id: str, start_wall: float) -> dict:
        """Play callers ``workers`` of ``level`` (each the suite ``repeat`` times, starting at its own
        scenario); returns the calls (records with raw turns), this process's resource figures and
        its raw loop-lag samples (ms)."""
        await asyncio.sleep(max(0.0, start_wall - time.time()))
        t0 = time.perf_counter() - (time.time() - start_wall)
        sink = _Collect()
        opts = BenchOptions(levels=[level], repeat=repeat, call_timeout_s=call_timeout_s, hashes=hashes)
        mon = Monitor()
        mon.start()
        caller_cpu: list[float] = []

        async def caller(w: int) -> None:
            for rnd in range(repeat):
                for k in range(len(scenarios)):
                    sc = scenarios[(k + w) % len(scenarios)]
                    rec = await run_one(self.agent, Job(sc, rendered[sc.name], level, w, rnd), run_id, sink, opts, t0)
                    if rec.get("caller_cpu_s") is not None:
                        caller_cpu.append(rec["caller_cpu_s"])

        try:
            async with asyncio.TaskGroup() as tg:
                for w in workers:
                    tg.create_task(caller(w))
        finally:
            stats = await mon.stop()
        return {"worker": self.index, "host": socket.gethostname(), "pid": os.getpid(), "callers": len(workers),
                "calls": sink.calls, "stats": stats, "lags_ms": list(mon.lags), "caller_cpu_s": caller_cpu}


def assign(level: int, n_workers: int) -> list[list[int]]:
    """Callers ``0…level-1`` dealt round-robin to ``n_workers`` actors (caller w → actor w mod n)."""
    return [list(range(a, level, n_workers)) for a in range(n_workers)]


def merge_level_stats(parts: list[dict[str, Any]], cores: int | None = None) -> dict[str, Any]:
    """One level's resource figures from the actors' parts, merged exactly: CPU seconds and RSS
    add up, wall time is the longest, the loop-lag percentiles come from the pooled raw samples
    (never an average of the actors' percentiles); ``workers`` keeps each actor's own figures."""
    stats = [p["stats"] for p in parts]
    wall = max((s["wall_s"] for s in stats), default=0.0)
    cpu = sum(s["cpu_s"] for s in stats)
    lags = [x for p in parts for x in p["lags_ms"]]
    caller = [x for p in parts for x in p["caller_cpu_s"]]
    busy = [s["machine_busy_pct"] for s in stats if s.get("machine_busy_pct") is not None]
    return {
        "wall_s": round(wall, 3),
        "cpu_s": round(cpu, 3),
        "cpu_pct": round(100.0 * cpu / wall, 1) if wall > 0 else None,  # 100 = one core, all actors
        "cores": cores,
        "machine_busy_pct": round(max(busy), 1) if busy else None,      # the busiest node
        "rss_start_mb": round(sum(s["rss_start_mb"] for s in stats), 1),
        "rss_peak_mb": round(sum(s["rss_peak_mb"] for s in stats), 1),  # all actors together
        "loop_lag_ms": {**percentiles(lags), "max": round(max(lags), 3) if lags else None},
        "caller_cpu_s": round(sum(caller), 4),
        "caller_cpu_share": round(sum(caller) / cpu, 5) if cpu > 0 else None,
        "calls": sum(len(p["calls"]) for p in parts),
        "workers": [{"worker": p["worker"], "host": p["host"], "pid": p["pid"], "callers": p["callers"],
                     "calls": len(p["calls"]), "cpu_s": p["stats"]["cpu_s"], "cpu_pct": p["stats"]["cpu_pct"],
                     "rss_peak_mb": p["stats"]["rss_peak_mb"], "loop_lag_p99_ms": p["stats"]["loop_lag_ms"]["p99"]}
                    for p in parts],
    }


def start_workers(spec: dict[str, Any], n: int) -> list[Any]:
    """``n`` :class:`CallerWorker` actors, one CPU each, spread over the cluster's nodes."""
    from .ray_cluster import require_ray
    ray = require_ray()
    actor = ray.remote(num_cpus=1, max_concurrency=100_000, scheduling_strategy="SPREAD")(CallerWorker)
    return [actor.remote(spec, i) for i in range(n)]


async def run_ray_bench(spec: dict[str, Any], scenarios: list, store: RunStore, run_id: str, opts: BenchOptions,
                        *, n_workers: int, cores: int | None = None, on_level=None,
                        on_workers=None) -> str:
    """Start ``n_workers`` actors, warm them, then run every level of ``opts`` on them; every call
    lands in ``store`` under ``run_id``, each level's merged figures too. Marks the run
    finished/failed/cancelled (as :func:`rejoinder.harness.bench.run_bench`)."""
    from .ray_cluster import require_ray
    from .suite import scenario_hash
    from .summary import run_summary
    ray = require_ray()
    status, actors = "failed", []
    try:
        actors = start_workers(spec, n_workers)
        where = await asyncio.gather(*[a.warmup.remote() for a in actors])
        if on_workers:
            on_workers(where)
        rendered = ray.put(await render_all(scenarios))
        hashes = opts.hashes or {sc.name: scenario_hash(sc) for sc in scenarios}
        for level in opts.levels:
            start = time.time() + START_AHEAD_S
            shares = assign(level, len(actors))
            parts = await asyncio.gather(*[a.run_level.remote(scenarios, rendered, level, share, opts.repeat,
                                                              opts.call_timeout_s, hashes, run_id, start)
                                           for a, share in zip(actors, shares) if share])
            for part in parts:
                for rec, turns in part["calls"]:
                    store.add_call(run_id, rec, turns)
                    if opts.on_call:
                        opts.on_call({**rec, "turns": turns})
            stats = merge_level_stats(parts, cores)
            store.add_level(run_id, level, stats)
            if on_level:
                on_level(level, stats)
        status = "finished"
    except (asyncio.CancelledError, KeyboardInterrupt):
        status = "cancelled"
        raise
    finally:
        for a in actors:
            ray.kill(a)
        store.finish_run(run_id, status, run_summary(store, run_id))
    return status
