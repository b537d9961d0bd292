"""The ASGI app: the browser client at ``/``, ``GET /health``, ``GET /metrics`` (Prometheus
exposition format, see :mod:`rejoinder.telemetry.metrics`), WebSockets ``/ws`` and ``/twilio``.

Each accepted socket is one call through the same :class:`~rejoinder.session.Session` as
``rejoinder call``. Models are loaded once per process, in the background at startup (``/health``
says ``loading`` until then; calls meanwhile are refused with 1013). Which models and application
a call gets comes from a :class:`CallProvider`: the embedded :class:`AgentProvider` in production,
fakes in tests.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from pathlib import Path
from typing import Any, Protocol

from fastapi import FastAPI, Request, WebSocket
from fastapi.responses import FileResponse, JSONResponse, Response
from fastapi.staticfiles import StaticFiles
from pydantic import BaseModel, ConfigDict, Field
from starlette.websockets import WebSocketState

from .. import telemetry
from ..agent import Agent
from ..session import Stack
from ..tools import CallContext
from ..turns import TurnPolicy
from .browser import BrowserLink, read_hello
from .guard import CallSlots, MessageGuard, check_token
from .live import LiveCall
from .protocol import CallEnded, Close, error_message
from .reports import CallReports
from .store import CallStore, LiveRuns
from .twilio import TwilioLink, read_start

log = logging.getLogger("rejoinder.server")
STATIC = Path(__file__).parent / "static"


class ServerConfig(BaseModel):
    """Limits and settings of a server (every socket, every call)."""

    model_config = ConfigDict(extra="forbid")
    token: str = Field(min_length=8)
    max_calls: int = Field(4, ge=1, description="calls in progress at once; more are refused (1013)")
    max_call_s: float = Field(900, gt=0, description="longest call (s)")
    max_text_bytes: int = Field(8192, gt=0)
    max_binary_bytes: int = Field(32768, gt=0)
    msgs_per_s: float = Field(120, gt=0, description="sustained messages per second per socket")
    bytes_per_s: float = Field(200_000, gt=0, description="sustained bytes per second per socket")
    store_dir: Path | None = Field(None, description="folder for call records; None keeps none")
    run_store: str | Path | None = Field(None, description="harness run store for live calls: a SQLite "
                                         "file or a postgresql:// URL")
    record_runs: bool = Field(False, description="record live calls in the run store")
    transfer_webhook: str | None = Field(None, description="/twilio: URL that receives the agent's "
                                         "transfer requests (JSON with the <Dial> TwiML)")
    transfer_target: str | None = Field(None, description="/twilio: <Dial> target when the agent's "
                                        "transfer tool names none")


class CallProvider(Protocol):
    """Where calls get their models, their agent and its per-call context."""

    policy: TurnPolicy | None
    agent: Agent

    async def warmup(self) -> None: ...

    def new_stack(self) -> Stack: ...

    def session_options(self) -> dict[str, Any]: ...

    async def open_call(self, call_id: str, caller_id: str | None) -> CallContext: ...

    async def close_call(self, ctx: CallContext) -> Any: ...


def _conditions(provider: Any, cfg: Any) -> dict[str, Any]:
    """The live run's conditions, recorded like a harness run's (versions, models, machine…)."""
    runtime = getattr(provider, "runtime", None)
    agent_cfg = getattr(runtime, "cfg", None)
    if agent_cfg is None:  # a test provider: no agent configuration to describe
        return {"transport": "live", "hosting": getattr(provider, "hosting", "unknown"),
                "max_calls": cfg.max_calls}
    from ..harness import conditions
    out = conditions.collect(agent_cfg, concurrency=[cfg.max_calls], scenarios={}, repeat=1,
                             suite="live", agent=runtime.agent)
    out.update(transport="live", max_calls=cfg.max_calls,
               arrangement="one server process, each socket a call sharing the loaded models")
    return out


class AgentProvider:
    """A :class:`~rejoinder.runtime.Runtime`: models shared, one context per call."""

    def __init__(self, runtime) -> None:
        self.runtime = runtime
        self.agent = runtime.agent
        self.policy = runtime.cfg.turns
        self.hosting = runtime.cfg.hosting

    def describe(self) -> dict[str, Any]:
        return self.runtime.cfg.model_dump(mode="json")

    async def warmup(self) -> None:
        await self.runtime.warmup()

    def new_stack(self) -> Stack:
        return self.runtime.new_stack()

    def session_options(self) -> dict[str, Any]:
        c = self.runtime.cfg
        return {"recovery": c.recovery, "filler": c.filler, "preemptive": c.preemptive}

    async def open_call(self, call_id: str, caller_id: str | None) -> CallContext:
        return await self.runtime.open_call(call_id, caller_id)

    async def close_call(self, ctx: CallContext) -> Any:
        return await self.runtime.close_call(ctx)

    def loaded_models(self) -> dict[str, int]:
        """``{stage: 1}`` for each model stage loaded (the ``rejoinder_models_loaded`` gauge)."""
        stack = self.runtime.models
        if stack is None:
            return {}
        return {stage: 1 for stage in ("vad", "turn", "stt", "llm", "tts", "backup_tts")
                if getattr(stack, stage, None) is not None}


class _State:
    def __init__(self, cfg: ServerConfig, provider: CallProvider) -> None:
        self.cfg = cfg
        self.provider = provider
        self.slots = CallSlots(cfg.max_calls)
        self.store = CallStore(cfg.store_dir)
        self.models = "loading"
        self.calls_served = 0
        self.runs: LiveRuns | None = None
        self.reports = CallReports()
        self.info: dict[str, Any] | None = None

    def guard(self) -> MessageGuard:
        c = self.cfg
        return MessageGuard(max_text=c.max_text_bytes, max_binary=c.max_binary_bytes,
                            msgs_per_s=c.msgs_per_s, bytes_per_s=c.bytes_per_s)


async def _close(ws: WebSocket, ended: CallEnded | None, *, json_errors: bool) -> None:
    if ended is None or ws.client_state is not WebSocketState.CONNECTED \
            or ws.application_state is not WebSocketState.CONNECTED:
        return
    with contextlib.suppress(Exception):
        if json_errors and ended.error_code:
            await ws.send_text(error_message(ended.error_code, ended.reason))
        await ws.close(ended.code, ended.reason)


def create_app(cfg: ServerConfig, provider: CallProvider) -> FastAPI:
    """Build the server app. Models load in the background when the app starts."""
    state = _State(cfg, provider)
    tel = telemetry.configure(prometheus=True)

    def models_loaded() -> dict[str, int]:
        loaded = getattr(provider, "loaded_models", None)
        if loaded is not None:
            return loaded()
        return {"all": int(state.models == "ready")}

    async def load_models() -> None:
        try:
            await provider.warmup()
            state.models = "ready"
        except Exception:
            log.exception("loading the models failed")
            state.models = "failed"

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI):
        task = asyncio.create_task(load_models())
        from ..telemetry.metrics import LoopLag
        lag = LoopLag()
        lag.start()
        tel.instruments.add_server(models_loaded, lag)
        if cfg.record_runs:
            state.runs = await asyncio.to_thread(LiveRuns, cfg.run_store, _conditions(provider, cfg),
                                                 "rejoinder serve")
        try:
            yield
        finally:
            task.cancel()
            with contextlib.suppress(BaseException):
                await task
            if state.runs is not None:
                await asyncio.to_thread(state.runs.close)
            tel.instruments.remove_server(lag)
            await lag.stop()

    app = FastAPI(title="rejoinder", lifespan=lifespan, docs_url=None, redoc_url=None)
    app.state.rejoinder = state
    app.mount("/static", StaticFiles(directory=STATIC), name="static")

    @app.get("/")
    async def index() -> FileResponse:
        return FileResponse(STATIC / "index.html", headers={"Cache-Control": "no-store"})

    @app.get("/health")
    async def health() -> JSONResponse:
        return JSONResponse({"status": "ok" if state.models != "failed" else "degraded",
                             "models": state.models, "calls": state.slots.active,
                             "max_calls": cfg.max_calls, "calls_served": state.calls_served,
                             "tasks": len(asyncio.all_tasks())})

    def authorized(request: Request) -> bool:
        given = request.headers.get("authorization", "")
        given = given[7:] if given.lower().startswith("bearer ") else request.query_params.get("token")
        try:
            check_token(cfg.token, given)
        except CallEnded:
            return False
        return True

    unauthorized = {"detail": "missing or wrong token: send 'Authorization: Bearer <server token>'"}

    @app.get("/info")
    async def info(request: Request) -> JSONResponse:
        """What this server is (versions, models, configuration) — for a harness's run record."""
        if not authorized(request):
            return JSONResponse(unauthorized, status_code=401)
        if state.info is None:
            state.info = {"server": "rejoinder serve", "protocols": ["/ws", "/twilio"], "call_reports": True,
                          "conditions": await asyncio.to_thread(_conditions, provider, cfg)}
        return JSONResponse(state.info)

    @app.get("/calls/{ref}")
    async def call_report(ref: str, request: Request) -> JSONResponse:
        """One call's report (PROTOCOL.md, "Call reports"), by call id or Media Streams streamSid."""
        if not authorized(request):
            return JSONResponse(unauthorized, status_code=401)
        report = state.reports.get(ref)
        if report is None:
            return JSONResponse({"detail": f"no call {ref!r} (reports are kept for the last "
                                           f"{state.reports.keep} calls)"}, status_code=404)
        return JSONResponse(report)

    @app.get("/metrics")
    async def metrics() -> Response:
        """Prometheus exposition format: latency histograms, counters and gauges (no call ids)."""
        from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, generate_latest
        body = await asyncio.to_thread(generate_latest, REGISTRY)
        return Response(body, media_type=CONTENT_TYPE_LATEST)

    async def serve(ws: WebSocket, transport: str) -> None:
        await ws.accept()
        browser = transport == "browser"
        guard = state.guard()
        try:
            if browser:
                opener = await read_hello(ws, guard, cfg.token)
                phone = opener.caller_phone
            else:
                opener = await read_start(ws, guard, cfg.token)
                phone = opener.customParameters.get("caller_phone")
            if state.models != "ready":
                raise CallEnded(Close.BUSY, f"models {state.models}; try again shortly",
                                error_code="loading")
            state.slots.acquire()
        except CallEnded as exc:
            await _close(ws, exc, json_errors=browser)
            return
        ctx = None
        try:
            call_id = uuid.uuid4().hex[:12]
            ctx = await provider.open_call(call_id, phone)
            call = LiveCall(call_id=call_id, transport=transport, stack=provider.new_stack(),
                            agent=provider.agent, ctx=ctx, policy=provider.policy,
                            record=state.store.open(call_id, transport), max_call_s=cfg.max_call_s,
                            **provider.session_options())
            report = state.reports.open(call_id, transport, None if browser else opener.streamSid)
            log.info("call %s (%s) started", call_id, transport)
            if browser:
                link = BrowserLink(ws, call, opener, guard)
                ended = await call.run(link.receive, link.send_raw, link.pinger)
            else:
                link = TwilioLink(ws, call, opener, guard, transfer_webhook=cfg.transfer_webhook,
                                  transfer_target=cfg.transfer_target)
                ended = await call.run(link.receive, link.send_raw)
            log.info("call %s ended: %s", call_id, ended)
            final, ctx = await provider.close_call(ctx), None   # the agent's report_state
            state.reports.finish(report, call, final)
            await _close(ws, ended, json_errors=browser)
            if state.runs is not None:
                transcript = "".join(f"{who}: {text}\n" for who, text in call.lines)
                await asyncio.to_thread(state.runs.add, call.record, call.meta, transcript,
                                        state.slots.active)
        except Exception:
            log.exception("call setup failed")
            await _close(ws, CallEnded(Close.SERVER_ERROR, "server error", error_code="server_error"),
                         json_errors=browser)
        finally:
            if ctx is not None:
                with contextlib.suppress(Exception):
                    await provider.close_call(ctx)
            state.slots.release()
            state.calls_served += 1

    @app.websocket("/ws")
    async def ws_browser(ws: WebSocket) -> None:
        await serve(ws, "browser")

    @app.websocket("/twilio")
    async def ws_twilio(ws: WebSocket) -> None:
        await serve(ws, "twilio")

    return app
