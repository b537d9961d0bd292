"""``rejoinder serve --ray``: the agent server as a Ray Serve deployment that autoscales on calls
in progress; the model servers (stt, tts, llm) as deployments of their own, scaled separately
(:mod:`rejoinder.server.ray_models`).

* **agent** — the same FastAPI app as ``rejoinder serve`` (:func:`rejoinder.server.app.create_app`:
  browser ``/ws``, ``/twilio``, ``/health``, ``/metrics``, ``/info``, ``/calls/{id}``) behind
  Ray Serve's HTTP proxy on ``host:port``. Each replica loads its models before it takes a request
  (the app is built in ``__serve_build_asgi_app__``, awaited by Serve before the replica is
  RUNNING). A WebSocket is one long request to one replica, so a call stays on the replica that
  took it; Serve counts it as an ongoing request for as long as the socket is open, and that is
  the autoscaling signal: ``target_ongoing_requests`` = calls per replica (``--target-calls``).
  A replica chosen for scale-down stops getting new calls and is given ``drain_s`` (default: the
  longest call) for its calls to end (``graceful_shutdown_timeout_s``).
* **stt, tts, llm** (``--models stt,tts,llm``) — the model servers under ``/models/<name>``, each
  with its own replicas and autoscaling; the agent's stack is pointed at them
  (:mod:`rejoinder.server.ray_models`).

Call reports (``GET /calls/{id}``) are kept by a shared actor as well as by the replica that
served the call, so any replica answers for any call. The driver (this command) watches the
replica counts (``serve.status()``) and writes each scaling event — when, which deployment,
from → to, the calls in progress — into a run of the store (one note per event, and the list in
the run's summary), beside the cluster's description in the run's conditions.
"""

from __future__ import annotations

import time
from typing import Any

from fastapi import Request
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute
from pydantic import BaseModel, ConfigDict, Field

from .reports import CallReports

APP = "rejoinder"
LEDGER = "rejoinder-call-ledger"


class ScaleOptions(BaseModel):
    """Replicas and autoscaling of one deployment (Ray Serve ``autoscaling_config``)."""

    model_config = ConfigDict(extra="forbid")
    min_replicas: int = Field(1, ge=1)
    max_replicas: int = Field(2, ge=1)
    target_calls: float = Field(2.0, gt=0, description="calls (ongoing requests) per replica to aim for")
    max_calls: int = Field(4, ge=1, description="calls one replica takes at once; more wait at the proxy")
    upscale_delay_s: float = Field(2.0, ge=0)
    downscale_delay_s: float = Field(10.0, ge=0)
    drain_s: float = Field(900.0, gt=0, description="how long a replica being removed waits for its calls")
    cpus: float = Field(1.0, gt=0, description="CPUs reserved per replica")

    def deployment_options(self) -> dict[str, Any]:
        return {"autoscaling_config": {"min_replicas": self.min_replicas, "initial_replicas": self.min_replicas,
                                       "max_replicas": max(self.max_replicas, self.min_replicas),
                                       "target_ongoing_requests": self.target_calls,
                                       "upscale_delay_s": self.upscale_delay_s,
                                       "downscale_delay_s": self.downscale_delay_s,
                                       "metrics_interval_s": 0.5, "look_back_period_s": 2.0},
                # the proxy sends a replica no more sockets than its server takes: one more waits
                # at the proxy (for a replica with room, or a new one) instead of being refused
                "max_ongoing_requests": self.max_calls,
                "graceful_shutdown_timeout_s": self.drain_s, "graceful_shutdown_wait_loop_s": 0.5,
                "ray_actor_options": {"num_cpus": self.cpus}}


class CallLedger:
    """The calls of every replica (a Ray actor): call reports by id and stream id, and which
    replica took each call. Reports are kept for the last :data:`~.reports.KEEP` × 4 keys."""

    def __init__(self) -> None:
        self.reports: dict[str, dict[str, Any]] = {}
        self.replica: dict[str, str] = {}
        self.replicas: dict[str, dict[str, Any]] = {}  # id → {"ready_unix", "stopped_unix"}

    def hello(self, replica: str, at_unix: float) -> None:
        """A replica has loaded its models and takes calls."""
        self.replicas[replica] = {"ready_unix": at_unix, "stopped_unix": None}

    def bye(self, replica: str, at_unix: float) -> None:
        """A replica has drained (its calls ended) and stops."""
        self.replicas.setdefault(replica, {"ready_unix": None})["stopped_unix"] = at_unix

    def lifetimes(self) -> dict[str, dict[str, Any]]:
        """Per replica: when it was ready and stopped (Unix s), and its calls (id, start/end, how it ended)."""
        out = {r: {**v, "calls": []} for r, v in self.replicas.items()}
        for k, rep in self.reports.items():
            if k == rep.get("call_id"):
                out.setdefault(self.replica[k], {"calls": []})["calls"].append(
                    {k2: rep.get(k2) for k2 in ("call_id", "stream_sid", "status", "ended", "at_unix", "ended_unix")})
        return out

    def put(self, keys: list[str], report: dict[str, Any], replica: str) -> None:
        for k in keys:
            self.reports[k] = report
            self.replica[k] = replica
        while len(self.reports) > 4 * 256:
            old = next(iter(self.reports))
            self.reports.pop(old)
            self.replica.pop(old, None)

    def get(self, key: str) -> dict[str, Any] | None:
        return self.reports.get(key)

    def in_progress(self) -> dict[str, int]:
        """Calls running now, per replica."""
        out: dict[str, int] = {}
        for k, r in self.reports.items():
            if r.get("status") == "running" and k == r.get("call_id"):
                out[self.replica[k]] = out.get(self.replica[k], 0) + 1
        return out

    def served(self) -> dict[str, int]:
        """Calls taken so far, per replica."""
        out: dict[str, int] = {}
        for k, r in self.reports.items():
            if k == r.get("call_id"):
                out[self.replica[k]] = out.get(self.replica[k], 0) + 1
        return out


class SharedReports(CallReports):
    """The replica's call reports, each also sent to the :class:`CallLedger` when the call
    starts and when it ends (``ray`` actor calls, fire and forget: never on the audio path)."""

    def __init__(self, ledger: Any, replica: str) -> None:
        super().__init__()
        self.ledger, self.replica = ledger, replica

    def _push(self, report: dict[str, Any]) -> None:
        report.setdefault("at_unix", time.time())
        if report.get("status") == "ended":
            report.setdefault("ended_unix", time.time())
        keys = [k for k in (report.get("call_id"), report.get("stream_sid")) if k]
        self.ledger.put.remote(keys, dict(report), self.replica)

    def open(self, call_id: str, transport: str, alias: str | None = None) -> dict[str, Any]:
        report = super().open(call_id, transport, alias)
        report["replica"] = self.replica
        self._push(report)
        return report

    def finish(self, report: dict[str, Any], call: Any, final_state: Any) -> None:  # type: ignore[override]
        CallReports.finish(report, call, final_state)
        self._push(report)


def _agent_app(server_cfg: dict[str, Any], agent_cfg: dict[str, Any], zero_cost: bool, options: dict[str, Any]):
    """The agent deployment, bound to its arguments (built here: ``ray.serve`` imports lazily)."""
    from ray import serve

    @serve.deployment(name="agent", **options)
    @serve.ingress()
    class AgentServer:
        def __init__(self, server_cfg: dict[str, Any], agent_cfg: dict[str, Any], zero_cost: bool) -> None:
            from ..config import AgentConfig
            cfg = AgentConfig.model_validate(agent_cfg)
            if zero_cost:
                from ..harness.zerocost import ZeroCostRuntime
                self.runtime = ZeroCostRuntime(cfg)
            else:
                from ..runtime import Runtime
                self.runtime = Runtime(cfg)
            self.server_cfg = server_cfg
            self.replica = serve.get_replica_context().replica_tag

        async def __serve_build_asgi_app__(self):
            import ray

            from .app import AgentProvider, ServerConfig, create_app
            await self.runtime.warmup()  # the replica takes no call before its models are loaded
            app = create_app(ServerConfig(**self.server_cfg), AgentProvider(self.runtime))
            state = app.state.rejoinder
            state.reports = SharedReports(ray.get_actor(LEDGER, namespace=APP), self.replica)
            _route_reports_through_ledger(app, state)
            await state.reports.ledger.hello.remote(self.replica, time.time())
            return app

        async def __del__(self):
            """Serve calls this once the replica has drained (no call left, or ``drain_s`` up)."""
            import ray
            try:
                await ray.get_actor(LEDGER, namespace=APP).bye.remote(self.replica, time.time())
            except Exception:  # noqa: BLE001 — the ledger is gone when the whole app stops
                pass
            await super().__del__()

    return AgentServer.bind(server_cfg, agent_cfg, zero_cost)


def _route_reports_through_ledger(app: Any, state: Any) -> None:
    """``GET /calls/{ref}``: this replica's report, else the ledger's (a call another replica
    took). Registered in front of the app's own route."""
    from .guard import check_token
    from .protocol import CallEnded

    async def call_report(ref: str, request: Request) -> JSONResponse:
        given = request.headers.get("authorization", "")
        given = given[7:] if given.lower().startswith("bearer ") else request.query_params.get("token")
        try:
            check_token(state.cfg.token, given)
        except CallEnded:
            return JSONResponse({"detail": "missing or wrong token: send 'Authorization: Bearer <server token>'"},
                                status_code=401)
        report = state.reports.get(ref)
        if report is None:
            report = await state.reports.ledger.get.remote(ref)
        if report is None:
            return JSONResponse({"detail": f"no call {ref!r}"}, status_code=404)
        return JSONResponse(report)

    app.router.routes.insert(0, APIRoute("/calls/{ref}", call_report, methods=["GET"]))
