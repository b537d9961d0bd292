"""The ``ray-serve`` hosting arrangement of ``rejoinder bench --hosting``: the same agent (same
configuration, models in its process) deployed as one Ray Serve replica behind Serve's HTTP
proxy on 127.0.0.1 (:mod:`rejoinder.server.ray_serve`), called by the simulated callers over
``/twilio`` (Media Streams) from the bench process.

Measured like the other arrangements: every critical-path segment (the replica reports its call,
so its internal moments split the wait; ``arrival`` is the proxy hop plus the socket), cold start
(``serve.run`` → the application RUNNING with its models loaded, and the local cluster's own
start before it), and CPU/RSS of each process on the serving side: the replica, Serve's proxy
and controller, Ray's raylet and GCS. The callers' jitter buffer (60 ms) is part of V2V here, as
for any remote target; the run's conditions say so.
"""

from __future__ import annotations

import secrets
import time
from typing import Any

import psutil

DESCRIPTION = ("the agent as one Ray Serve replica (models in the replica) behind Serve's HTTP proxy; callers "
               "over /twilio (Media Streams, 60 ms jitter buffer)")
PROCESS_NAMES = {"replica": "ServeReplica", "serve-proxy": "ProxyActor", "serve-controller": "ServeController",
                 "raylet": "raylet", "gcs": "gcs_server"}


def ray_processes() -> dict[str, int]:
    """Pids of the serving side among this process's descendants (a local cluster), by name."""
    out: dict[str, int] = {}
    for p in psutil.Process().children(recursive=True):
        try:
            line = " ".join(p.cmdline()) or p.name()
        except psutil.Error:
            continue
        for name, needle in PROCESS_NAMES.items():
            if needle in line and name not in out:
                out[name] = p.pid
    return out


class RayServeArrangement:
    """``async with RayServeArrangement(cfg, failure) as arr``: a local cluster, the agent
    deployed, a :class:`~rejoinder.harness.remote.target.RemoteTarget` on its ``/twilio``."""

    def __init__(self, cfg: Any, failure: str | None = None, port: int | None = None) -> None:
        self.cfg, self.failure = cfg, failure
        self.port = port
        self.token = secrets.token_hex(12)
        self.cluster = None
        self.cold: dict[str, float] = {}
        self.target = None

    async def __aenter__(self) -> "RayServeArrangement":
        from ray import serve

        from ..server.ray_driver import deploy
        from ..server.ray_serve import ScaleOptions
        from . import ray_cluster
        from ..adapters.llama_server import free_port
        from .remote.target import RemoteTarget, parse_target

        self.port = self.port or free_port()
        t0 = time.perf_counter()
        self.cluster = ray_cluster.connect("local", num_cpus=psutil.cpu_count() or 2)
        self.cold["cluster"] = round(1000.0 * (time.perf_counter() - t0), 1)
        try:
            cfg = self.cfg.model_copy(deep=True)
            if self.failure:
                cfg.faults, cfg.fault_seed = self.failure, 1
            one = ScaleOptions(min_replicas=1, max_replicas=1, max_calls=64, drain_s=60)
            t1 = time.perf_counter()
            self.ledger, _ = await deploy(host="127.0.0.1", port=self.port,
                                          server_cfg={"token": self.token, "max_calls": 64, "record_runs": False},
                                          agent_cfg=cfg, zero_cost=False, agent_scale=one)
            self.cold["agent"] = round(1000.0 * (time.perf_counter() - t1), 1)
            self.target = RemoteTarget(parse_target(f"ws://127.0.0.1:{self.port}/twilio", token=self.token))
            await self.target.warmup()
        except BaseException:
            await self.__aexit__()
            serve.shutdown()
            raise
        return self

    async def __aexit__(self, *exc: Any) -> None:
        from . import ray_cluster
        if self.target is not None:
            self.target.close()
        try:
            from ray import serve
            serve.shutdown()
        except Exception:  # noqa: BLE001 — stopping anyway
            pass
        ray_cluster.shutdown(self.cluster)

    def conditions(self) -> dict[str, Any]:
        return {"hosting_arrangement": {"name": "ray-serve", "description": DESCRIPTION,
                                        "llm_hosting": "in the agent replica", "failure": self.failure,
                                        "agent_cold_start_ms": self.cold.get("agent"),
                                        "cluster_start_ms": self.cold.get("cluster")},
                "network_profile": {"name": "loopback", "description": "Serve's proxy on 127.0.0.1"},
                "servers": {"ray-cluster": {"cold_start_ms": self.cold.get("cluster"),
                                            "command": "ray.init(num_cpus=cores), one local node"}},
                "ray": self.cluster.info if self.cluster else None,
                "target": self.target.describe() if self.target else None,
                "jitter_ms": self.target.spec.jitter_ms if self.target else None}


async def run_plan(plan: Any, cfg: Any, scenarios: list, store: Any, opts: Any, *, suite: str,
                   command: str, on_run=None) -> tuple[str, str]:
    """One ``ray-serve`` plan as a stored run; returns ``(run_id, status)``."""
    from ..agent import load_agent
    from .bench import run_bench
    from .conditions import collect

    async with RayServeArrangement(cfg, plan.failure) as arr:
        run_cfg = cfg.model_copy(deep=True)
        run_cfg.hosting, run_cfg.network = "ray-serve", "loopback"
        conds = collect(run_cfg, concurrency=opts.levels, scenarios=opts.hashes, repeat=opts.repeat, suite=suite,
                        agent=load_agent(cfg.agent), arrangement=f"{plan.label}: {DESCRIPTION}", **arr.conditions())
        run_id = store.begin_run(conds, suite=suite, command=command)
        if on_run:
            on_run(plan, run_id)
        opts.processes = ray_processes()
        status = await run_bench(arr.target, scenarios, store, run_id, opts)
    return run_id, status
