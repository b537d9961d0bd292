"""rejoinder's tools over HTTP, so a peer bot runs the very same tool code (runs in rejoinder's venv).

One fresh demo database per call (like ``rejoinder serve``): ``POST /{call}/{tool}`` with
``{"args": {...}, "caller_phone": "+1…"}`` runs the tool and answers its JSON result;
``GET /{call}/db`` answers the call's database (``{table: {row id: {column: value}}}``).

The agent the tools belong to — its instructions, tools and LLM settings — is
:func:`agent_definition`; ``bench/vs_pipecat.py`` writes it to the JSON file the Pipecat bot
reads, so both bots get the same system prompt, temperature, token cap and tools.
"""

from __future__ import annotations

import socket
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import uvicorn
from fastapi import FastAPI
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field


class ToolCall(BaseModel):
    args: dict[str, Any] = Field(default_factory=dict)
    caller_phone: str | None = None


def agent_definition(max_tokens: int = 60, temperature: float = 0.0) -> dict[str, Any]:
    """The reference support agent as plain data: instructions, LLM settings, tool schemas.

    Today's support assistant (``rejoinder.app``): its system prompt and its tools. When the
    LLM-driven agent API lands (issue 8), read the same fields from the agent spec instead.
    """
    from rejoinder.app.assistant import SYSTEM_PROMPT
    from rejoinder.app.tools import TOOLS, tool_json_schema
    return {"instructions": SYSTEM_PROMPT, "temperature": temperature, "max_tokens": max_tokens,
            "tools": [tool_json_schema(t)["function"] for t in TOOLS.values()]}


def make_app(folder: Path) -> FastAPI:
    from rejoinder.app.db import db_state, fresh_demo_db
    from rejoinder.app.tools import TOOLS

    app = FastAPI(docs_url=None, redoc_url=None)
    dbs: dict[str, Any] = {}
    lock = threading.Lock()

    def conn_of(call: str):
        with lock:
            if call not in dbs:
                dbs[call] = fresh_demo_db(folder / f"{call}.sqlite")
            return dbs[call]

    @app.post("/{call}/{tool}")
    def run_tool(call: str, tool: str, body: ToolCall) -> JSONResponse:
        t = TOOLS.get(tool)
        if t is None:
            return JSONResponse({"error": f"no tool {tool!r}"}, status_code=404)
        return JSONResponse(t.invoke(conn_of(call), body.args))

    @app.get("/{call}/db")
    def db(call: str) -> JSONResponse:
        state = db_state(conn_of(call))
        return JSONResponse({t: {str(k): dict(v) for k, v in rows.items()} for t, rows in state.items()})

    return app


class ToolServer:
    """The tool server on a free 127.0.0.1 port, in a background thread."""

    def __init__(self) -> None:
        self.folder = Path(tempfile.mkdtemp(prefix="peer-tools-"))
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.server = uvicorn.Server(uvicorn.Config(make_app(self.folder), log_level="warning"))
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
