"""A TTS server speaking Cartesia Sonic's WebSocket protocol, serving any local TTS port (Piper).

Protocol (shared PROTOCOLS.md §1; Cartesia API version 2025-04-16 and later): ``GET /tts/websocket``
upgraded to a WebSocket, the API key in ``X-API-Key`` (or ``Authorization: Bearer``, or
``?api_key=``). Client → server JSON text frames: a generation request (``model_id``,
``transcript``, ``voice``, ``output_format``, ``context_id``, ``continue``, ``add_timestamps``,
``max_buffer_delay_ms``, ``flush``) or a cancel (``{"context_id": …, "cancel": true}``).
Server → client JSON: ``chunk`` (base64 PCM, ``step_time`` ms), ``timestamps``
(``word_timestamps: {words, start, end}`` in seconds from the context's start), ``flush_done``,
``done`` (once per context) and ``error`` (new shape: ``title``, ``message``, ``error_code``,
``status_code``; ``done: true``).

Contexts on one socket run concurrently; inputs of one context are spoken in order, and with
``continue: true`` the text is buffered until a sentence ends, ``flush``, ``continue: false`` or
``max_buffer_delay_ms`` elapses (0: every input is spoken at once). A cancel stops the context at
once (this server stops even the generation under way, which Cartesia does not promise). A bad
message gets an ``error`` and the socket stays open: a server survives every bad client.
"""

from __future__ import annotations

import asyncio
import base64
import json
import re
import uuid
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import soxr
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ..ports import TTSPort
from .wire import ENCODINGS, SAMPLE_RATES, ServerFaults, bearer_or_key, due_fault, encode_pcm, key_matches

PATH = "/tts/websocket"
MAX_MESSAGE = 1 << 20      # bytes per client message
_SENTENCE_END = re.compile(r"[.!?;:](\s|$)")


class OutputFormat(BaseModel):
    model_config = ConfigDict(extra="forbid")
    container: str = "raw"
    encoding: str = "pcm_s16le"
    sample_rate: int = 16000


class GenerationRequest(BaseModel):
    """One client input. Unknown fields are ignored (Cartesia adds fields between versions)."""

    model_config = ConfigDict(extra="ignore", populate_by_name=True)
    model_id: str = Field(min_length=1)
    transcript: str
    voice: Any
    output_format: OutputFormat
    context_id: str = Field(min_length=1, max_length=256)
    continue_: bool = Field(False, alias="continue")
    add_timestamps: bool = False
    language: str = "en"
    max_buffer_delay_ms: int = Field(0, ge=0, le=5000)
    flush: bool = False


def error_message(context_id: str | None, status: int, code: str, message: str) -> str:
    """A Cartesia ``error`` message (new shape, with the old ``error`` string as well)."""
    title = HTTPStatus(status).phrase
    return json.dumps({"type": "error", "context_id": context_id, "status_code": status, "done": True,
                       "title": title, "message": message, "error_code": code,
                       "error": f"{title}: {message}", "request_id": uuid.uuid4().hex})


@dataclass
class _Context:
    first: GenerationRequest
    inputs: asyncio.Queue = field(default_factory=asyncio.Queue)
    task: asyncio.Task | None = None
    offset_s: float = 0.0      # audio sent so far on this context (s)
    flush_id: int = 0


class CartesiaTTSServer:
    """Serves ``tts`` (any :class:`~rejoinder.ports.TTSPort`) over Cartesia's TTS WebSocket.

    Args:
        tts: the engine (e.g. Piper with word timings).
        api_key: the key clients must send; None runs without authentication.
        chunk_ms: audio per ``chunk`` message (ms).
        faults: server-side faults (see :mod:`rejoinder.hosting.wire`).
    """

    def __init__(self, tts: TTSPort, *, api_key: str | None, chunk_ms: float = 100.0,
                 faults: ServerFaults | None = None) -> None:
        self.tts = tts
        self.api_key = api_key
        self.chunk_ms = chunk_ms
        self.faults = faults or ServerFaults()
        self.contexts_served = 0
        self.cancelled = 0

    # -- handshake ---------------------------------------------------------------------------
    def process_request(self, connection, request):
        """Refuse a wrong path (404) or a missing/wrong API key (401) before the upgrade."""
        url = urlsplit(request.path)
        if url.path != PATH:
            return connection.respond(HTTPStatus.NOT_FOUND, f"no such endpoint {url.path}; use {PATH}\n")
        key = bearer_or_key(request.headers, dict(parse_qsl(url.query)))
        if not key_matches(self.api_key, key):
            return connection.respond(HTTPStatus.UNAUTHORIZED,
                                      "invalid or missing API key (send X-API-Key)\n")
        return None

    async def serve(self, host: str, port: int):
        """Start listening; returns the ``websockets`` server (``close()`` / ``wait_closed()``)."""
        from websockets.asyncio.server import serve

        return await serve(self.handler, host, port, process_request=self.process_request,
                           max_size=MAX_MESSAGE, ping_interval=20, ping_timeout=20)

    # -- one socket --------------------------------------------------------------------------
    async def handler(self, ws) -> None:
        contexts: dict[str, _Context] = {}
        try:
            async for message in ws:
                if isinstance(message, bytes):
                    await ws.send(error_message(None, 400, "invalid_request",
                                                "binary frames are not accepted; send JSON text"))
                    continue
                await self._on_message(ws, message, contexts)
        except Exception:  # noqa: BLE001 — a broken socket ends this connection only
            pass
        finally:
            for ctx in contexts.values():
                if ctx.task is not None:
                    ctx.task.cancel()
            await asyncio.gather(*(c.task for c in contexts.values() if c.task), return_exceptions=True)

    async def _on_message(self, ws, text: str, contexts: dict[str, _Context]) -> None:
        try:
            data = json.loads(text)
        except (ValueError, RecursionError):
            await ws.send(error_message(None, 400, "invalid_json", "message is not JSON"))
            return
        if not isinstance(data, dict):
            await ws.send(error_message(None, 400, "invalid_request", "message must be a JSON object"))
            return
        if data.get("cancel") is True:
            ctx = contexts.pop(str(data.get("context_id")), None)
            if ctx is not None and ctx.task is not None:
                self.cancelled += 1
                ctx.task.cancel()
            return
        try:
            req = GenerationRequest.model_validate(data)
        except ValidationError as exc:
            err = exc.errors()[0]
            where = ".".join(str(x) for x in err["loc"])
            await ws.send(error_message(data.get("context_id") if isinstance(data.get("context_id"), str)
                                        else None, 400, "invalid_request", f"{where}: {err['msg']}"))
            return
        problem = self._check_format(req.output_format)
        if problem:
            await ws.send(error_message(req.context_id, 400, "invalid_output_format", problem))
            return
        ctx = contexts.get(req.context_id)
        if ctx is None:
            ctx = contexts[req.context_id] = _Context(req)
            ctx.task = asyncio.get_running_loop().create_task(self._run_context(ws, ctx, contexts))
            self.contexts_served += 1
        elif req.output_format != ctx.first.output_format or req.voice != ctx.first.voice:
            await ws.send(error_message(req.context_id, 400, "context_mismatch", "every input on a "
                                        "context must keep the same voice and output_format"))
            return
        ctx.inputs.put_nowait(req)

    @staticmethod
    def _check_format(fmt: OutputFormat) -> str | None:
        if fmt.container != "raw":
            return "the WebSocket sends container 'raw' only"
        if fmt.encoding not in ENCODINGS:
            return f"encoding {fmt.encoding!r} is not supported here; use one of {', '.join(ENCODINGS)}"
        if fmt.sample_rate not in SAMPLE_RATES:
            return f"sample_rate must be one of {', '.join(map(str, SAMPLE_RATES))}"
        return None

    # -- one context -------------------------------------------------------------------------
    async def _run_context(self, ws, ctx: _Context, contexts: dict[str, _Context]) -> None:
        cid = ctx.first.context_id
        buffer = ""
        try:
            while True:
                req: GenerationRequest = await self._next_input(ctx, buffer)
                if req is None:  # the buffer delay elapsed
                    text, buffer = buffer, ""
                    await self._speak(ws, ctx, text)
                    continue
                buffer += req.transcript
                if not req.continue_ or req.flush or req.max_buffer_delay_ms == 0:
                    text, buffer = buffer, ""
                else:
                    last = None
                    for m in _SENTENCE_END.finditer(buffer):
                        last = m
                    text, buffer = (buffer[:last.end()], buffer[last.end():]) if last else ("", buffer)
                if text.strip():
                    await self._speak(ws, ctx, text)
                if req.flush:
                    ctx.flush_id += 1
                    await ws.send(json.dumps({"type": "flush_done", "context_id": cid, "done": False,
                                              "flush_done": True, "flush_id": ctx.flush_id,
                                              "status_code": 206}))
                if not req.continue_:
                    await ws.send(json.dumps({"type": "done", "context_id": cid, "done": True,
                                              "status_code": 206}))
                    return
        except _Abort:
            return
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 — the engine failed: tell this context, keep the socket
            try:
                await ws.send(error_message(cid, 500, "generation_failed", str(exc)[:300]))
            except Exception:  # noqa: BLE001
                pass
        finally:
            if contexts.get(cid) is ctx:
                contexts.pop(cid, None)

    async def _next_input(self, ctx: _Context, buffer: str):
        delay = ctx.first.max_buffer_delay_ms
        if buffer.strip() and delay > 0:
            try:
                return await asyncio.wait_for(ctx.inputs.get(), delay / 1000.0)
            except TimeoutError:
                return None
        return await ctx.inputs.get()

    async def _speak(self, ws, ctx: _Context, text: str) -> None:
        """Synthesize ``text`` and send it: per engine piece, its word timestamps then its audio in
        ``chunk_ms`` messages."""
        fmt = ctx.first.output_format
        cid = ctx.first.context_id
        rate_in = self.tts.sample_rate
        resampler = None if rate_in == fmt.sample_rate else soxr.ResampleStream(
            rate_in, fmt.sample_rate, 1, dtype="int16")
        step = max(1, int(fmt.sample_rate * self.chunk_ms / 1000))
        faults = self.faults.draw()
        sent = 0
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        stream = self.tts.stream(text)
        try:
            async for piece in stream:
                if ctx.first.add_timestamps and piece.words:
                    words = [(w, ctx.offset_s + a / 1000.0, ctx.offset_s + b / 1000.0) for w, a, b in piece.words]
                    await ws.send(json.dumps({
                        "type": "timestamps", "context_id": cid, "status_code": 206, "done": False,
                        "word_timestamps": {"words": [w for w, _, _ in words],
                                            "start": [round(a, 4) for _, a, _ in words],
                                            "end": [round(b, 4) for _, _, b in words]}}))
                ctx.offset_s += len(piece.pcm) / rate_in
                pcm = piece.pcm if resampler is None else resampler.resample_chunk(piece.pcm)
                for i in range(0, len(pcm), step):
                    await self._inject(ws, faults, sent, cid)
                    data = base64.b64encode(encode_pcm(pcm[i:i + step], fmt.encoding)).decode("ascii")
                    await ws.send(json.dumps({"type": "chunk", "context_id": cid, "status_code": 206,
                                              "done": False, "data": data,
                                              "step_time": round(1000.0 * (loop.time() - t0), 1)}))
                    sent += 1
        finally:
            await stream.aclose()  # type: ignore[attr-defined]

    async def _inject(self, ws, faults, sent: int, cid: str) -> None:
        kind = await due_fault(faults, sent)
        if kind == "error":
            await ws.send(error_message(cid, 500, "injected_fault", "injected mid-stream error"))
        elif kind == "drop":
            ws.transport.abort()  # the connection dies without a close frame
        elif kind == "garbage":
            await ws.send("{not json")
        if kind is not None:
            raise _Abort()


class _Abort(Exception):
    """An injected fault ended this context."""
