"""The driver of ``rejoinder serve --ray``: connect to (or start) the cluster, deploy the agent
(and, with ``models``, the TTS model server) on Ray Serve, and record every scaling event.

:class:`ScalingWatch` polls ``serve.status()`` every ``poll_s`` (0.5 s): a change in a
deployment's RUNNING replicas is an event ``{"at_s", "deployment", "from", "to", "states",
"calls_in_progress"}`` (seconds since the deployment was ready; calls per replica from the call
ledger). Each event becomes a note of the serve run in the store, and the list is in the run's
summary when the server stops (SIGINT/SIGTERM, or after ``duration_s``).
"""

from __future__ import annotations

import asyncio
import json
import secrets
import signal
import sys
import time
from typing import Any, Callable

from .ray_serve import APP, LEDGER, CallLedger, ScaleOptions, _agent_app, _tts_app


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


def deploy(*, host: str, port: int, server_cfg: dict[str, Any], agent_cfg: Any, zero_cost: bool,
           agent_scale: ScaleOptions, models: list[str], tts_scale: ScaleOptions, tts_engine: str) -> Any:
    """Start Serve's proxy on ``host:port`` and deploy; returns the call ledger actor.

    The agent's stack is pointed at the TTS deployment when ``"tts" in models``.
    """
    import ray
    from ray import serve

    ledger = ray.remote(num_cpus=0)(CallLedger).options(name=LEDGER, namespace=APP).remote()
    serve.start(http_options={"host": host, "port": port})
    if "tts" in models:
        access, secret = "AKID" + secrets.token_hex(8).upper(), secrets.token_hex(16)
        serve.run(_tts_app(tts_engine, {**tts_scale.deployment_options()}, access, secret), name="tts",
                  route_prefix="/models/tts", blocking=False)
        agent_cfg = agent_cfg.model_copy(deep=True)
        agent_cfg.stack.tts = "sagemaker"
        sm = agent_cfg.stack.sagemaker
        sm.base_url, sm.endpoint_name = f"http://{host}:{port}/models/tts", "rejoinder-tts"
        sm.aws_access_key_id, sm.aws_secret_access_key = access, secret
    serve.run(_agent_app(server_cfg, agent_cfg.model_dump(mode="json"), zero_cost, agent_scale.deployment_options()),
              name=APP, route_prefix="/", blocking=False)
    return ledger


async def wait_ready(timeout_s: float = 600.0) -> None:
    """Until every application is RUNNING.

    Raises:
        RuntimeError: an application failed to deploy (with Serve's message), or the timeout.
    """
    from ray import serve
    deadline = time.monotonic() + timeout_s
    while True:
        st = await asyncio.to_thread(serve.status)
        apps = st.applications
        states = {n: str(getattr(a.status, "value", a.status)) for n, a in apps.items()}
        bad = [f"{n}: {a.message}" for n, a in apps.items() if states[n] == "DEPLOY_FAILED"]
        if bad:
            raise RuntimeError("deployment failed: " + "; ".join(bad))
        if apps and all(s == "RUNNING" for s in states.values()):
            return
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
              zero_cost: bool, agent_scale: ScaleOptions, models: list[str], tts_scale: ScaleOptions,
              tts_engine: str, store: Any, duration_s: float | None, console: Any) -> str:
    """Deploy, print ``ready http://HOST:PORT`` and each scaling event (JSON lines on stdout),
    record them in a run of ``store``; tear everything down on SIGINT/SIGTERM or after
    ``duration_s``. Returns the run id.

    Raises:
        MissingExtra: Ray is not installed.  ConfigError: the cluster cannot be reached.
        RuntimeError: a deployment failed (Serve's message).
    """
    from ..harness import conditions, ray_cluster
    from ..harness.summary import run_summary

    cluster = ray_cluster.connect(address, num_cpus=cpus)
    run_id, events = None, []
    try:
        from ..runtime import Runtime
        agent = Runtime(agent_cfg).agent if not zero_cost else None
        conds = conditions.collect(agent_cfg, concurrency=[agent_scale.max_calls], scenarios={}, repeat=1,
                                   suite="live", agent=agent,
                                   arrangement="agent server on Ray Serve, autoscaled on calls in progress"
                                   + (f"; model deployments: {', '.join(models)}" if models else ""))
        if zero_cost:
            from ..harness.zerocost import AGENT, mark_conditions
            mark_conditions(conds)
            conds["agent"] = AGENT.describe()
        conds.update(transport="live", ray=cluster.info,
                     deployments={"agent": agent_scale.deployment_options(),
                                  **({"tts": tts_scale.deployment_options()} if "tts" in models else {})})
        run_id = store.begin_run(conds, suite="live", command=" ".join(["rejoinder"] + sys.argv[1:]))

        def on_event(ev: dict[str, Any]) -> None:
            events.append(ev)
            say({"event": ev["kind"], **ev})
            store.add_note(run_id, f"{ev['kind']} {ev['deployment']}: {ev['from']} → {ev['to']} replicas at "
                           f"{ev['at_s']} s; calls in progress {json.dumps(ev['calls_in_progress'])}")

        async def main() -> dict[str, Any]:
            t0 = time.monotonic()
            ledger = deploy(host=host, port=port, server_cfg=server_cfg, agent_cfg=agent_cfg, zero_cost=zero_cost,
                            agent_scale=agent_scale, models=models, tts_scale=tts_scale, tts_engine=tts_engine)
            await wait_ready()
            cold = round(1000.0 * (time.monotonic() - t0), 1)
            store.add_note(run_id, f"deployed in {cold} ms (cluster up → every application RUNNING)")
            say(f"ready http://{host}:{port} run {run_id} cold_start_ms {cold}")
            w = await watch(ledger, duration_s=duration_s, on_event=on_event)
            lifetimes = await ledger.lifetimes.remote()
            return {"cold_start_ms": cold, "replicas": w.running, "served": await ledger.served.remote(),
                    "replica_lifetimes": lifetimes, "drained_calls": drained(lifetimes, w.events)}

        console.print(f"Ray {cluster.info['ray']} at {cluster.address}: {cluster.info['n_nodes']} node(s), "
                      f"{cluster.cpus} CPU(s); deploying the agent"
                      + (f" and {', '.join(models)}" if models else "") + " …", soft_wrap=True, highlight=False)
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
