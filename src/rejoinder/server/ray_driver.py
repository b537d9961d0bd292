"""The driver of ``rejoinder serve --ray``: connect to (or start) the cluster, deploy the agent
(and, with ``models``, the model servers: :mod:`.ray_models`) on Ray Serve, and record every
scaling event of every deployment.

:class:`ScalingWatch` polls ``serve.status()`` every ``poll_s`` (0.5 s): a change in a
deployment's RUNNING replicas is an event ``{"at_s", "deployment", "from", "to", "states",
"calls_in_progress"}`` (seconds since the deployment was ready; calls per replica from the call
ledger). Each event becomes a note of the serve run in the store, and the list is in the run's
summary when the server stops (SIGINT/SIGTERM, or after ``duration_s``).
"""

from __future__ import annotations

import asyncio
import json
import signal
import sys
import time
from typing import Any, Callable

from .ray_models import ModelDeployment, point
from .ray_serve import APP, LEDGER, CallLedger, ScaleOptions, _agent_app


class ScalingWatch:
    """Replica counts per deployment, and the events where they changed."""

    def __init__(self, ledger: Any, on_event: Callable[[dict[str, Any]], None] | None = None) -> None:
        self.ledger, self.on_event = ledger, on_event
        self.t0 = time.monotonic()
        self.running: dict[str, int] = {}
        self.events: list[dict[str, Any]] = []

    async def poll(self) -> list[dict[str, Any]]:
        """One look at ``serve.status()``; returns the events it found (also kept)."""
        from ray import serve
        status = await asyncio.to_thread(serve.status)
        found = []
        for app in status.applications.values():
            for name, dep in app.deployments.items():
                states = {str(getattr(k, "value", k)): v for k, v in dep.replica_states.items()}
                n = states.get("RUNNING", 0)
                before = self.running.get(name)
                self.running[name] = n
                if before is None or before == n:
                    continue
                ev = {"at_s": round(time.monotonic() - self.t0, 2), "at_unix": time.time(), "deployment": name, "from": before, "to": n,
                      "kind": "scale-up" if n > before else "scale-down", "states": states,
                      "calls_in_progress": await self.ledger.in_progress.remote()}
                self.events.append(ev)
                found.append(ev)
                if self.on_event:
                    self.on_event(ev)
        return found


async def deploy(*, host: str, port: int, server_cfg: dict[str, Any], agent_cfg: Any, zero_cost: bool,
                 agent_scale: ScaleOptions, models: list[ModelDeployment] = (),
                 timeout_s: float = 900.0) -> tuple[Any, dict[str, float]]:
    """Start Serve's proxy on ``host:port``, deploy the model servers (each its own application
    under ``/models/<name>``) and wait until they are RUNNING, then the agent (``/``), so the
    agent's warm-up finds them. ``agent_cfg`` is already pointed at them
    (:func:`~.ray_models.point`). Returns the call ledger actor and, per application, the ms from
    its deployment (``serve.run_many``, all model servers at once) to the 0.5 s poll that saw it
    RUNNING (every replica's model loaded).

    Raises:
        ConfigError: the replicas' CPUs (at least one replica each) exceed the cluster's.
        RuntimeError: a deployment failed (Serve's message) or was not RUNNING in ``timeout_s``.
    """
    import ray
    from ray import serve

    from ..errors import ConfigError

    need = agent_scale.min_replicas * agent_scale.cpus + sum(m.scale.min_replicas * m.scale.cpus for m in models)
    have = float(ray.cluster_resources().get("CPU", 0))
    if need > have + 1e-9:
        raise ConfigError(f"the deployments reserve {need:g} CPUs (agent {agent_scale.cpus:g} × "
                          f"{agent_scale.min_replicas}" + "".join(f", {m.name} {m.scale.cpus:g}" for m in models)
                          + f") but the cluster has {have:g}: lower --model-cpus or give the cluster more "
                          "(--ray-cpus)")
    ledger = ray.remote(num_cpus=0)(CallLedger).options(name=LEDGER, namespace=APP).remote()
    serve.start(http_options={"host": host, "port": port})
    running: dict[str, float] = {}

    async def start(targets: list[Any]) -> dict[str, float]:
        """Deploy at once (the replicas load in parallel), then poll until every one is RUNNING."""
        t0 = time.monotonic()
        await asyncio.to_thread(serve.run_many, targets, wait_for_ingress_deployment_creation=False,
                                wait_for_applications_running=False)
        return await wait_ready(timeout_s, since=t0)

    if models:
        running.update(await start([serve.RunTarget(m.app(), name=m.name, route_prefix=m.route_prefix)
                                    for m in models]))
    agent = _agent_app(server_cfg, agent_cfg.model_dump(mode="json"), zero_cost, agent_scale.deployment_options())
    running[APP] = (await start([serve.RunTarget(agent, name=APP, route_prefix="/")]))[APP]
    return ledger, running


async def wait_ready(timeout_s: float = 600.0, since: float | None = None) -> dict[str, float]:
    """Until every application is RUNNING; returns per application the ms from ``since``
    (``time.monotonic()``, default: now) to the poll (every 0.5 s) that first saw it RUNNING.

    Raises:
        RuntimeError: an application failed to deploy (with Serve's message), or the timeout.
    """
    from ray import serve
    since = time.monotonic() if since is None else since
    deadline = time.monotonic() + timeout_s
    seen: dict[str, float] = {}
    while True:
        st = await asyncio.to_thread(serve.status)
        apps = st.applications
        states = {n: str(getattr(a.status, "value", a.status)) for n, a in apps.items()}
        bad = [f"{n}: {a.message}" for n, a in apps.items() if states[n] == "DEPLOY_FAILED"]
        if bad:
            raise RuntimeError("deployment failed: " + "; ".join(bad))
        for n, s in states.items():
            if s == "RUNNING":
                seen.setdefault(n, round(1000.0 * (time.monotonic() - since), 1))
        if apps and all(s == "RUNNING" for s in states.values()):
            return seen
        if time.monotonic() > deadline:
            raise RuntimeError(f"not running after {timeout_s:.0f} s: {states}")
        await asyncio.sleep(0.5)


async def watch(ledger: Any, *, duration_s: float | None, on_event: Callable[[dict[str, Any]], None],
                poll_s: float = 0.5) -> ScalingWatch:
    """Watch the replica counts until SIGINT/SIGTERM or ``duration_s``."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    w = ScalingWatch(ledger, on_event)
    await w.poll()  # the starting counts (not events)
    end = time.monotonic() + duration_s if duration_s else None
    while not stop.is_set() and (end is None or time.monotonic() < end):
        try:
            await asyncio.wait_for(stop.wait(), poll_s)
        except asyncio.TimeoutError:
            pass
        await w.poll()
    return w


def drained(lifetimes: dict[str, dict[str, Any]], events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Calls in progress on a replica when scale-down chose it, with how they ended. The replica
    that stopped at ``stopped_unix`` was chosen at the last scale-down event before then; a call
    on it that began before and ended after that event was drained (it ran to its end)."""
    downs = sorted(e["at_unix"] for e in events if e["kind"] == "scale-down")
    out = []
    for rep, life in lifetimes.items():
        stop = life.get("stopped_unix")
        chosen = max((t for t in downs if stop and t <= stop), default=None)
        if chosen is None:
            continue
        for c in life["calls"]:
            if (c.get("at_unix") or 0) < chosen < (c.get("ended_unix") or float("inf")):
                out.append({"replica": rep, "scale_down_unix": chosen, **c})
    return out


def say(line: dict[str, Any] | str) -> None:
    """One line on stdout (a JSON object for events), flushed: scripts read it."""
    sys.stdout.write((line if isinstance(line, str) else json.dumps(line)) + "\n")
    sys.stdout.flush()


def serve_ray(*, address: str, cpus: int | None, host: str, port: int, server_cfg: dict[str, Any], agent_cfg: Any,
              zero_cost: bool, agent_scale: ScaleOptions, models: list[ModelDeployment], store: Any,
              duration_s: float | None, console: Any) -> str:
    """Deploy (the agent's stack pointed at ``models``), print one JSON line per deployment when
    it is RUNNING (``{"event": "running", "deployment", "running_ms", "replicas"}``), then
    ``ready http://HOST:PORT run RUN_ID cold_start_ms MS`` and each scaling event (JSON lines on
    stdout), record them in a run of ``store`` (each deployment's options in its conditions, one
    note per deployment RUNNING and per scaling event); tear everything down on SIGINT/SIGTERM or
    after ``duration_s``. Returns the run id.

    Raises:
        MissingExtra: Ray is not installed.  ConfigError: the cluster cannot be reached.
        RuntimeError: a deployment failed (Serve's message).
    """
    from ..harness import conditions, ray_cluster
    from ..harness.summary import run_summary

    cluster = ray_cluster.connect(address, num_cpus=cpus)
    run_id, events = None, []
    names = [m.name for m in models]
    try:
        agent_cfg = point(agent_cfg, models, host, port)
        from ..runtime import Runtime
        agent = Runtime(agent_cfg).agent if not zero_cost else None
        conds = conditions.collect(agent_cfg, concurrency=[agent_scale.max_calls], scenarios={}, repeat=1,
                                   suite="live", agent=agent,
                                   arrangement="agent server on Ray Serve, autoscaled on calls in progress"
                                   + (f"; model deployments: {', '.join(names)}" if models else ""))
        if zero_cost:
            from ..harness.zerocost import AGENT, mark_conditions
            mark_conditions(conds)
            conds["agent"] = AGENT.describe()
        conds.update(transport="live", ray=cluster.info,
                     deployments={"agent": agent_scale.deployment_options(),
                                  **{m.name: m.describe() for m in models}})
        run_id = store.begin_run(conds, suite="live", command=" ".join(["rejoinder"] + sys.argv[1:]))

        def on_event(ev: dict[str, Any]) -> None:
            events.append(ev)
            say({"event": ev["kind"], **ev})
            store.add_note(run_id, f"{ev['kind']} {ev['deployment']}: {ev['from']} → {ev['to']} replicas at "
                           f"{ev['at_s']} s; calls in progress {json.dumps(ev['calls_in_progress'])}")

        async def main() -> dict[str, Any]:
            t0 = time.monotonic()
            ledger, running = await deploy(host=host, port=port, server_cfg=server_cfg, agent_cfg=agent_cfg,
                                           zero_cost=zero_cost, agent_scale=agent_scale, models=models)
            cold = round(1000.0 * (time.monotonic() - t0), 1)
            scales = {"agent": agent_scale, **{m.name: m.scale for m in models}}
            for app, ms in running.items():
                name = "agent" if app == APP else app
                say({"event": "running", "deployment": name, "running_ms": ms,
                     "replicas": scales[name].min_replicas})
                store.add_note(run_id, f"{name} RUNNING {ms} ms after it was deployed ({scales[name].min_replicas} "
                               f"replica(s), at most {scales[name].max_replicas}, {scales[name].cpus:g} CPU each)")
            store.add_note(run_id, f"deployed in {cold} ms (cluster up → every application RUNNING)")
            say(f"ready http://{host}:{port} run {run_id} cold_start_ms {cold}")
            w = await watch(ledger, duration_s=duration_s, on_event=on_event)
            lifetimes = await ledger.lifetimes.remote()
            return {"cold_start_ms": cold, "running_ms": {("agent" if a == APP else a): ms for a, ms in running.items()},
                    "replicas": w.running, "served": await ledger.served.remote(),
                    "replica_lifetimes": lifetimes, "drained_calls": drained(lifetimes, w.events)}

        console.print(f"Ray {cluster.info['ray']} at {cluster.address}: {cluster.info['n_nodes']} node(s), "
                      f"{cluster.cpus} CPU(s); deploying the agent"
                      + (f" and {', '.join(names)}" if models else "") + " …", soft_wrap=True, highlight=False)
        end = asyncio.run(main())
        store.finish_run(run_id, "finished", {**run_summary(store, run_id), "scaling_events": events, **end})
        say({"event": "stopped", **end})
        return run_id
    except BaseException:
        if run_id is not None:
            store.finish_run(run_id, "failed", {"scaling_events": events})
        raise
    finally:
        try:
            from ray import serve
            serve.shutdown()
        except Exception:  # noqa: BLE001 — stopping anyway
            pass
        ray_cluster.shutdown(cluster)
