"""A rejoinder agent's tools over HTTP, so a peer bot runs the very same tool code (in rejoinder's venv).

Per call (``{call}`` is the peer's call id, e.g. the Media Streams ``streamSid``), the agent's
``on_call_start`` hook opens the call's context on first use — for the support agent, a fresh
demo database and the customer identified by the caller's number, exactly as in ``rejoinder serve``:

* ``POST /{call}/tools/{tool}`` with ``{"args": {...}, "caller_phone": "+1…"}`` runs the tool and
  answers ``{"result": …}`` or ``{"error": "…"}`` (what the LLM is told, as in rejoinder);
* ``GET /{call}/greeting?caller_phone=…`` answers ``{"text": …}``, the agent's greeting;
* ``GET /{call}/state`` answers the agent's ``report_state`` (the final database).

:func:`agent_definition` is the agent as plain data — instructions, LLM settings, tool schemas, STT
vocabulary — which ``bench/vs_pipecat.py`` writes to the JSON file the Pipecat bot reads, so both
bots get the same system prompt, temperature, token cap and tools.
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from typing import Any

import uvicorn
from fastapi import FastAPI
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field

from rejoinder.agent import Agent, call_hook, load_agent
from rejoinder.tools import CallContext, ToolError


class ToolCall(BaseModel):
    args: dict[str, Any] = Field(default_factory=dict)
    caller_phone: str | None = None


def agent_definition(spec: str | None = None) -> dict[str, Any]:
    """The agent named by ``spec`` (``rejoinder --agent`` syntax; default: the support agent) as
    data: ``instructions``, ``temperature``, ``max_tokens``, ``tools`` (name, description, JSON
    Schema ``parameters``), ``stt_prompt``, ``greeting`` (whether it greets) and ``describe``."""
    agent = load_agent(spec)
    return {"spec": spec or "support", "instructions": agent.instructions,
            "temperature": agent.llm.temperature, "max_tokens": agent.llm.max_tokens,
            "tools": [{"name": t.schema.name, "description": t.schema.description,
                       "parameters": t.schema.parameters} for t in agent.tools.values()],
            "stt_prompt": agent.stt_prompt(), "greets": agent.greeting is not None,
            "describe": agent.describe()}


def make_app(agent: Agent) -> FastAPI:
    app = FastAPI(docs_url=None, redoc_url=None)
    calls: dict[str, CallContext] = {}
    lock = asyncio.Lock()

    async def context(call: str, caller_phone: str | None) -> CallContext:
        async with lock:
            ctx = calls.get(call)
            if ctx is None:
                ctx = calls[call] = CallContext(call, caller_phone)
                await call_hook(agent.on_call_start, ctx)
            return ctx

    @app.post("/{call}/tools/{name}")
    async def run_tool(call: str, name: str, body: ToolCall) -> JSONResponse:
        tool = agent.tools.get(name)
        if tool is None:
            return JSONResponse({"error": f"no tool named {name!r}"})
        ctx = await context(call, body.caller_phone)
        try:
            return JSONResponse({"result": await tool.run(ctx, body.args)})
        except (ToolError, TimeoutError) as exc:
            return JSONResponse({"error": str(exc) or type(exc).__name__})

    @app.get("/{call}/greeting")
    async def greeting(call: str, caller_phone: str | None = None) -> JSONResponse:
        g = agent.greeting
        text = g(await context(call, caller_phone)) if callable(g) else g
        return JSONResponse({"text": text})

    @app.get("/{call}/state")
    async def state(call: str) -> JSONResponse:
        ctx = calls.get(call)
        return JSONResponse(await call_hook(agent.report_state, ctx) if ctx is not None else None)

    @app.on_event("shutdown")
    async def close_all() -> None:
        for ctx in calls.values():
            await call_hook(agent.on_call_end, ctx)

    return app


class ToolServer:
    """The tool server on a free 127.0.0.1 port, in a background thread."""

    def __init__(self, spec: str | None = None) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.server = uvicorn.Server(uvicorn.Config(make_app(load_agent(spec)), log_level="warning"))
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True)

    def __enter__(self) -> "ToolServer":
        self.thread.start()
        while not self.server.started:
            time.sleep(0.02)
        return self

    def __exit__(self, *exc: Any) -> None:
        self.server.should_exit = True
        self.thread.join(10)
        self.sock.close()
