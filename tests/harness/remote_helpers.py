"""Helpers for the remote-target tests: a transcriber stand-in, short caller turns, and targets that
misbehave on purpose (each a real socket server on 127.0.0.1)."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import socket

import numpy as np

from rejoinder.harness.caller import RenderedTurn, voiced_span
from rejoinder.scenario import CallerTurn, Segment


class NoTranscript:
    """Stands in for Whisper where the words do not matter: says how much audio it got."""

    def __init__(self) -> None:
        self.calls: list[int] = []

    async def start(self) -> None:
        pass

    async def text(self, pcm: np.ndarray) -> str:
        self.calls.append(len(pcm))
        return f"{len(pcm)} samples"

    def close(self) -> None:
        pass


def tone(ms: float, amp: float = 0.3, hz: float = 220.0) -> np.ndarray:
    t = np.arange(int(16 * ms)) / 16000
    return (amp * 32767 * np.sin(2 * np.pi * hz * t)).astype(np.int16)


def tone_turns(n: int = 1, ms: float = 600.0) -> list[RenderedTurn]:
    """``n`` caller turns of a tone each (the second and later answer 300 ms after the agent)."""
    pcm = tone(ms)
    return [RenderedTurn(pcm, voiced_span(pcm), CallerTurn(audio=[Segment(silence_ms=1)],
                                                           after_agent_ms=300 if k else None))
            for k in range(n)]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.asynccontextmanager
async def raw_server(reply: bytes | None):
    """A TCP server that accepts and then sends ``reply`` (None: says nothing, ever)."""
    async def handle(reader, writer):
        if reply is not None:
            writer.write(reply)
            await writer.drain()
            writer.close()
            return
        await asyncio.sleep(3600)

    srv = await asyncio.start_server(handle, "127.0.0.1", 0)
    try:
        yield srv.sockets[0].getsockname()[1]
    finally:
        srv.close()


@contextlib.asynccontextmanager
async def ws_server(behaviour):
    """A WebSocket server whose connections run ``behaviour(conn)``; yields the port."""
    from websockets.asyncio.server import serve

    async def handler(conn):
        with contextlib.suppress(Exception):
            await behaviour(conn)

    async with serve(handler, "127.0.0.1", 0, compression=None, ping_interval=None, close_timeout=0.5) as srv:
        yield srv.sockets[0].getsockname()[1]


async def drain(conn) -> None:
    """Read (and drop) everything until the caller hangs up."""
    async for _ in conn:
        pass


async def after_start(conn, first: str = "start") -> None:
    """Read messages until the call has opened (Twilio ``start`` or /ws ``hello``)."""
    async for msg in conn:
        if isinstance(msg, str) and first in msg:
            return


async def open_ws_call(conn, line_rate: int = 16000) -> None:
    """The /ws opening, seen from the target: hello → ping → pong → ready."""
    await after_start(conn, "hello")
    await conn.send(json.dumps({"type": "ping", "id": 1}))
    await after_start(conn, "pong")
    await conn.send(json.dumps({"type": "ready", "call_id": "c1", "line_rate": line_rate, "frame_ms": 20}))


def media(payload: bytes) -> str:
    return json.dumps({"event": "media", "streamSid": "MZ", "media": {"payload": base64.b64encode(payload).decode()}})
