"""A voice agent reached over a socket, measured like the in-process one.

:class:`RemoteTarget` is what ``rejoinder bench --target URL`` and ``rejoinder call --target URL``
run the scenarios against. It has the in-process agent's shape (``warmup()``, ``call(turns,
…)``), so the concurrency sweep, expectations, run store and ``runs compare`` are the same code.

Per call: the scripted caller plays over the socket (:mod:`.call`), its ear yields the replies
(:mod:`.replies`), the embedded Whisper transcribes what the caller heard (:mod:`.transcribe`) so
``reply_contains`` is scored on the words actually heard, and a target that reports its calls
(:mod:`.reports`) adds its internal boundaries, tool calls and final database state.

Protocol: ``auto`` picks rejoinder's ``/ws`` protocol for a path ending in ``/ws`` and Twilio
Media Streams for anything else (``/twilio``, Pipecat's ``/ws``-less routes …); say it with
``--protocol`` when the path misleads.
"""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any, Literal
from urllib.parse import parse_qs, urlsplit, urlunsplit

from pydantic import BaseModel, ConfigDict, Field

from ..caller import RenderedTurn, SimulatedCaller
from ...clock import RealClock
from .call import RemoteCallResult, heard_records, play, transcript_lines, write_records
from .jitter import JitterBuffer
from .links import LINKS, TargetError, connect
from .reports import fetch_call, get_json, http_base, merge_report

Protocol = Literal["twilio", "rejoinder"]
DEFAULT_JITTER_MS = 60.0


class TargetSpec(BaseModel):
    """Where and how to reach a target (validated; the token is never stored)."""

    model_config = ConfigDict(extra="forbid")
    url: str
    protocol: Protocol
    token: str | None = Field(None, repr=False, exclude=True)
    jitter_ms: float = Field(DEFAULT_JITTER_MS, ge=0, le=2000,
                             description="depth of the caller's jitter buffer (ms), counted in V2V")
    connect_timeout_s: float = Field(5.0, gt=0)
    ready_timeout_s: float = Field(10.0, gt=0)
    reports: bool = Field(True, description="ask the target for its call reports (GET /calls/{id})")

    @property
    def shown_url(self) -> str:
        """The URL without a ``token`` query parameter."""
        u = urlsplit(self.url)
        q = "&".join(p for p in u.query.split("&") if p and not p.startswith("token="))
        return urlunsplit((u.scheme, u.netloc, u.path, q, ""))


def parse_target(url: str, protocol: str = "auto", token: str | None = None, **kw: Any) -> TargetSpec:
    """Check a target URL and pick its protocol.

    Raises:
        TargetError: not a ``ws://`` / ``wss://`` URL with a host, or an unknown protocol.
    """
    u = urlsplit(url)
    if u.scheme not in ("ws", "wss") or not u.hostname:
        raise TargetError(f"{url!r} is not a WebSocket URL; use ws://HOST:PORT/PATH (e.g. "
                          "ws://127.0.0.1:8765/twilio or ws://127.0.0.1:8765/ws)")
    try:
        u.port
    except ValueError:
        raise TargetError(f"{url!r}: the port is not a number") from None
    if protocol == "auto":
        protocol = "rejoinder" if u.path.rstrip("/").endswith("/ws") else "twilio"
    if protocol not in ("twilio", "rejoinder"):
        raise TargetError(f"unknown protocol {protocol!r}; use twilio (Media Streams) or rejoinder (/ws)")
    token = token or (parse_qs(u.query).get("token") or [None])[0]
    return TargetSpec(url=url, protocol=protocol, token=token, **kw)


class RemoteTarget:
    """A target agent over a socket, with the in-process agent's interface.

    ``transcriber``: an object with ``async text(pcm) -> str`` (int16 16 kHz in), ``start`` and
    ``close``; default: Whisper base in a low-priority worker (:class:`.transcribe.Transcriber`).
    """

    def __init__(self, spec: TargetSpec, *, transcriber: Any = None) -> None:
        self.spec = spec
        self.info: dict[str, Any] = {}
        self.health: dict[str, Any] | None = None
        if transcriber is None:
            from .transcribe import Transcriber
            transcriber = Transcriber()
        self.transcriber = transcriber

    async def probe(self, models_timeout_s: float = 300.0) -> None:
        """Check that the target answers a WebSocket handshake; wait while its ``/health`` says
        its models are loading; read ``/info``.

        Raises:
            TargetError: refused, not a WebSocket, no handshake in time, wrong token for /info,
                or models that failed to load.
        """
        ws = await connect(self.spec.url, self.spec.connect_timeout_s)
        await ws.close()
        base = http_base(self.spec.url)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + models_timeout_s
        while True:
            status, body = await get_json(f"{base}/health", None, timeout_s=30.0)
            self.health = body if status == 200 and isinstance(body, dict) else None
            models = (self.health or {}).get("models")
            if models != "loading":
                break
            if loop.time() > deadline:
                raise TargetError(f"{base}/health still says models 'loading' after {models_timeout_s:.0f} s")
            await asyncio.sleep(0.5)
        if models == "failed":
            raise TargetError(f"{base}/health says the target's models failed to load; see its log")
        # a proxied target (Ray Serve) can take seconds to route its first request on a loaded box:
        # a generous timeout and one retry when the request could not be made at all
        for _ in range(2):
            status, body = await get_json(f"{base}/info", self.spec.token, timeout_s=30.0)
            if status != 0:
                break
        if status == 401:
            raise TargetError(f"{base}/info refused the token (401): pass the target's token with --target-token "
                              "or REJOINDER_TARGET_TOKEN")
        self.info = body if status == 200 and isinstance(body, dict) else {}

    async def warmup(self) -> None:
        """Probe the target and start the transcriber (loads Whisper once)."""
        if self.health is None and not self.info:
            await self.probe()
        await self.transcriber.start()

    def describe(self) -> dict[str, Any]:
        """The target as recorded with a run: URL (no token), protocol, jitter buffer, what it
        reports about itself."""
        health = {k: self.health.get(k) for k in ("status", "models", "max_calls")} if self.health else None
        return {"url": self.spec.shown_url, "protocol": self.spec.protocol, "jitter_ms": self.spec.jitter_ms,
                "health": health, "info": self.info}

    async def call(self, turns: list[RenderedTurn], *, out_dir: Path | None = None, caller_phone: str | None = None,
                   tail_ms: float = 2500.0, call_id: str | None = None, max_ms: float = 900000.0,
                   **_: Any) -> RemoteCallResult:
        """One call; never raises for the target's failures (they are in ``result.error``)."""
        call_id = call_id or uuid.uuid4().hex[:12]
        spec = self.spec
        link = LINKS[spec.protocol](spec.url, JitterBuffer(spec.jitter_ms), RealClock(), token=spec.token,
                                    caller_phone=caller_phone, connect_timeout_s=spec.connect_timeout_s)
        try:
            p = await play(link, turns, tail_ms=tail_ms, max_ms=max_ms, out_dir=out_dir,
                           ready_timeout_s=spec.ready_timeout_s)
        except TargetError as exc:
            return RemoteCallResult(call_id, [], out_dir, 0.0, 0.0, error=str(exc), caller=SimulatedCaller(turns))
        heard = heard_records(p, turns)
        for rec in heard.records:
            reply = heard.replies.get(rec.turn_id)
            if reply is not None:
                rec.heard_text = await self.transcriber.text(reply.audio())
        result = RemoteCallResult(call_id, heard.records, out_dir, p.caller.cpu_s, p.duration_ms, error=p.error,
                                  caller=p.caller, owners=heard.owners, overtalk_ms=p.overtalk, heard=heard)
        result.target = {"protocol": link.protocol, "ref": link.ref, "messages": link.messages,
                         "received_ms": round(p.jb.received_samples / 16.0, 1), "bursts": len(p.jb.bursts),
                         **{k: v for k, v in link.reported.items() if k in ("clears", "marks", "errors", "notices")}}
        if spec.reports and link.ref:
            report = await fetch_call(spec.url, link.ref, spec.token)
            if report is not None:
                merge_report(result, report, link.origin_ms, keyed=link.protocol == "rejoinder",
                             wall_origin_s=link.wall_origin_s)
        result.transcript = transcript_lines(heard, p.caller, turns)
        write_records(out_dir, result)
        return result

    def close(self) -> None:
        self.transcriber.close()

