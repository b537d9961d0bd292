"""An STT server speaking Cartesia Ink's WebSocket protocol, serving any local STT port (Whisper).

Protocol (shared PROTOCOLS.md §2.1): ``GET /stt/websocket?model=…&encoding=…&sample_rate=…
[&language=…]`` upgraded to a WebSocket, the API key in ``X-API-Key`` (or ``Authorization:
Bearer``, or ``?api_key=``). Client → server: binary frames of raw audio in the declared encoding,
and the bare text commands ``finalize`` (flush: the buffered audio is transcribed; reply
``flush_done``) and ``close`` (or the older ``done``: flush, reply ``done``, close the socket).
Server → client JSON: ``transcript`` (``text`` — the delta since the last final — ``is_final``,
``duration`` s, ``language``, ``words: [{word, start, end}]`` s), ``flush_done``, ``done`` and
``error``. A missing or bad query parameter refuses the upgrade with HTTP 400 naming it; a bad
command gets an ``error`` and the socket stays open. The socket closes after ``idle_s`` without
audio or a command (Cartesia: 20 s).

Whisper is a batch model: transcripts come on ``finalize``/``close``; with ``interim_ms`` > 0 the
server also transcribes the audio so far every ``interim_ms`` of new audio (``is_final: false``).

Two faces, one protocol (:meth:`CartesiaSTTServer.session`): a plain ``websockets`` server
(:meth:`CartesiaSTTServer.serve`, ``rejoinder models serve stt``) and an ASGI app
(:func:`create_app`, for hosts that route WebSockets to ASGI apps only: Ray Serve).
"""

from __future__ import annotations

import asyncio
import json
import uuid
from http import HTTPStatus
from typing import Protocol
from urllib.parse import parse_qsl, urlsplit

import numpy as np

from ..audio_io import resample
from ..ports import STTPort
from .wire import ENCODINGS, ServerFaults, bearer_or_key, decode_pcm, key_matches

PATH = "/stt/websocket"
MAX_MESSAGE = 1 << 20          # bytes per binary frame (≈ 32 s of 16 kHz int16)
MAX_BUFFER_S = 120.0           # audio held between two flushes


class CartesiaSTTServer:
    """Serves ``stt`` (any :class:`~rejoinder.ports.STTPort`) over Cartesia's STT WebSocket.

    Args:
        stt: the engine (Whisper base). api_key: the key clients must send (None: no auth).
        idle_s: close a socket with no audio or command for this long.
        interim_ms: emit interim transcripts every this much new audio (0: never).
        faults: server-side faults (``error``: an ``error`` message instead of the transcript,
            ``drop``: close the connection abruptly, ``stall=ms``, ``garbage``).
    """

    def __init__(self, stt: STTPort, *, api_key: str | None, idle_s: float = 20.0,
                 interim_ms: float = 0.0, faults: ServerFaults | None = None) -> None:
        self.stt = stt
        self.api_key = api_key
        self.idle_s = idle_s
        self.interim_ms = interim_ms
        self.faults = faults or ServerFaults()
        self.utterances = 0

    def refusal(self, headers, query: dict[str, str]) -> tuple[HTTPStatus, str] | None:
        """Why an upgrade is refused: a bad key (401) or a bad query parameter (400); None to
        accept. ``headers``: any case-insensitive mapping (websockets' or Starlette's)."""
        if not key_matches(self.api_key, bearer_or_key(headers, query)):
            return HTTPStatus.UNAUTHORIZED, "invalid or missing API key (send X-API-Key)"
        problem = self._check_query(query)
        return (HTTPStatus.BAD_REQUEST, problem) if problem else None

    def process_request(self, connection, request):
        """Refuse a wrong path (404), a bad key (401) or a bad query parameter (400)."""
        url = urlsplit(request.path)
        if url.path != PATH:
            return connection.respond(HTTPStatus.NOT_FOUND, f"no such endpoint {url.path}; use {PATH}\n")
        refused = self.refusal(request.headers, dict(parse_qsl(url.query)))
        return connection.respond(refused[0], refused[1] + "\n") if refused else None

    @staticmethod
    def _check_query(query: dict[str, str]) -> str | None:
        for name in ("model", "encoding", "sample_rate"):
            if not query.get(name):
                return f"query parameter '{name}' is required"
        if query["encoding"] not in ENCODINGS:
            return f"encoding {query['encoding']!r} is not supported here; use one of {', '.join(ENCODINGS)}"
        try:
            rate = int(query["sample_rate"])
        except ValueError:
            return f"sample_rate must be an integer number of Hz, got {query['sample_rate']!r}"
        if not 8000 <= rate <= 48000:
            return f"sample_rate {rate} is outside 8000..48000 Hz"
        return None

    async def serve(self, host: str, port: int):
        """Start listening; returns the ``websockets`` server."""
        from websockets.asyncio.server import serve

        return await serve(self.handler, host, port, process_request=self.process_request,
                           max_size=MAX_MESSAGE, ping_interval=20, ping_timeout=20)

    async def handler(self, ws) -> None:
        """One connection of the plain ``websockets`` server (:meth:`serve`)."""
        await self.session(_Websockets(ws), dict(parse_qsl(urlsplit(ws.request.path).query)))

    async def session(self, ws: "Socket", query: dict[str, str]) -> None:
        """The protocol on one accepted socket whose upgrade :meth:`refusal` let through, for
        either face: the ``websockets`` server (:meth:`handler`) or the ASGI app
        (:func:`create_app`)."""
        encoding, rate = query["encoding"], int(query["sample_rate"])
        language = query.get("language", "en")
        request_id = uuid.uuid4().hex
        chunks: list[np.ndarray] = []
        held = 0            # samples buffered (at ``rate``)
        since_interim = 0
        interim: asyncio.Task | None = None
        try:
            while True:
                try:
                    message = await asyncio.wait_for(ws.recv(), self.idle_s)
                except TimeoutError:
                    await ws.close(1000, f"no audio or command for {self.idle_s:.0f} s")
                    return
                if isinstance(message, bytes):
                    try:
                        x = decode_pcm(message, encoding)
                    except ValueError as exc:
                        await ws.send(self._error(request_id, 400, "invalid_audio", str(exc)))
                        continue
                    if held + len(x) > MAX_BUFFER_S * rate:
                        await ws.send(self._error(request_id, 400, "buffer_full", f"more than "
                                                  f"{MAX_BUFFER_S:.0f} s of audio without finalize"))
                        continue
                    chunks.append(x)
                    held += len(x)
                    since_interim += len(x)
                    if (self.interim_ms > 0 and since_interim >= self.interim_ms * rate / 1000
                            and (interim is None or interim.done())):
                        since_interim = 0
                        audio = np.concatenate(chunks)
                        interim = asyncio.get_running_loop().create_task(
                            self._interim(ws, audio, rate, language, request_id))
                    continue
                command = message.strip()
                if command not in ("finalize", "close", "done"):
                    await ws.send(self._error(request_id, 400, "invalid_command",
                                              f"unknown command {command[:40]!r}; send finalize or close"))
                    continue
                if interim is not None:
                    interim.cancel()
                audio = np.concatenate(chunks) if chunks else np.zeros(0, np.float32)
                chunks, held, since_interim = [], 0, 0
                if not await self._final(ws, audio, rate, language, request_id):
                    return
                if command == "finalize":
                    await ws.send(json.dumps({"type": "flush_done", "request_id": request_id}))
                else:
                    await ws.send(json.dumps({"type": "done", "request_id": request_id}))
                    await ws.close(1000, "done")
                    return
        except Exception:  # noqa: BLE001 — a broken client ends its own socket only
            return
        finally:
            if interim is not None:
                interim.cancel()

    async def _transcribe(self, audio: np.ndarray, rate: int):
        x = audio if rate == self.stt.sample_rate else resample(audio, rate, self.stt.sample_rate)

        async def one():
            yield x

        last = None
        async for tr in self.stt.stream(one()):
            last = tr
        return last

    async def _interim(self, ws, audio: np.ndarray, rate: int, language: str, rid: str) -> None:
        tr = await self._transcribe(audio, rate)
        if tr is not None and tr.text.strip():
            await ws.send(self._transcript(rid, tr, False, len(audio) / rate, language))

    async def _final(self, ws, audio: np.ndarray, rate: int, language: str, rid: str) -> bool:
        """Transcribe and send the final; False when an injected fault ended the socket."""
        self.utterances += 1
        for f in self.faults.draw():
            if f.kind in ("stall", "slow"):
                await asyncio.sleep(f.value_ms / 1000.0)
            elif f.kind == "error":
                await ws.send(self._error(rid, 500, "injected_fault", "injected transcription error"))
                return True
            elif f.kind == "drop":
                await ws.abort()
                return False
            elif f.kind == "garbage":
                await ws.send("{not json")
                return True
        if len(audio) == 0:
            return True
        try:
            tr = await self._transcribe(audio, rate)
        except Exception as exc:  # noqa: BLE001 — tell the client, keep serving
            await ws.send(self._error(rid, 500, "transcription_failed", str(exc)[:300]))
            return True
        if tr is not None:
            await ws.send(self._transcript(rid, tr, True, len(audio) / rate, language))
        return True

    @staticmethod
    def _transcript(rid: str, tr, final: bool, duration_s: float, language: str) -> str:
        return json.dumps({"type": "transcript", "request_id": rid, "text": tr.text, "is_final": final,
                           "duration": round(duration_s, 3), "language": language,
                           "words": [{"word": w, "start": round(a / 1000.0, 3), "end": round(b / 1000.0, 3)}
                                     for w, a, b in tr.words]})

    @staticmethod
    def _error(rid: str, status: int, code: str, message: str) -> str:
        return json.dumps({"type": "error", "request_id": rid, "status_code": status, "error_code": code,
                           "title": HTTPStatus(status).phrase, "message": message, "code": status})


class Socket(Protocol):
    """What :meth:`CartesiaSTTServer.session` needs of a socket: ``recv`` (bytes or str; raises
    once the peer is gone), ``send`` (text), ``close`` and ``abort`` (end it without a close
    handshake where the face can)."""

    async def recv(self) -> bytes | str: ...
    async def send(self, text: str) -> None: ...
    async def close(self, code: int, reason: str) -> None: ...
    async def abort(self) -> None: ...


class _Websockets:
    """A ``websockets`` connection as a :class:`Socket`."""

    def __init__(self, ws) -> None:
        self.ws = ws
        self.recv, self.send, self.close = ws.recv, ws.send, ws.close

    async def abort(self) -> None:
        self.ws.transport.abort()


class _ASGI:
    """A Starlette WebSocket as a :class:`Socket`. ASGI has no way to cut the TCP connection, so
    ``abort`` closes with 1011 (the client sees the socket end before ``done`` either way)."""

    def __init__(self, ws) -> None:
        self.ws = ws

    async def recv(self) -> bytes | str:
        msg = await self.ws.receive()
        if msg["type"] == "websocket.disconnect":
            raise ConnectionError(f"the client closed the socket ({msg.get('code')})")
        data = msg.get("bytes")
        if data is not None and len(data) > MAX_MESSAGE:
            await self.ws.close(1009, f"frame over {MAX_MESSAGE} bytes")
            raise ConnectionError("frame too big")
        return data if data is not None else msg.get("text") or ""

    async def send(self, text: str) -> None:
        await self.ws.send_text(text)

    async def close(self, code: int, reason: str) -> None:
        await self.ws.close(code, reason)

    async def abort(self) -> None:
        await self.ws.close(1011)


def create_app(server: CartesiaSTTServer):
    """``server`` as an ASGI app (FastAPI): the same protocol at ``GET {PATH}`` (upgraded),
    ``GET /health`` → ``{"ok": true}``. For ASGI hosts such as Ray Serve (the ``stt`` deployment
    of ``rejoinder serve --ray --models stt``), which route WebSockets only to ASGI apps. A
    refused upgrade answers the status and reason in an HTTP response where the host supports
    ASGI's ``websocket.http.response`` extension, else closes the handshake (HTTP 403) with
    close code 1008 and the reason."""
    from fastapi import FastAPI
    from fastapi.responses import PlainTextResponse
    from starlette.routing import WebSocketRoute

    app = FastAPI(title="rejoinder STT (Cartesia Ink protocol)", docs_url=None, redoc_url=None, openapi_url=None)

    @app.get("/health")
    async def health() -> dict[str, bool]:
        return {"ok": True}

    async def stt(websocket) -> None:  # a starlette WebSocket (a plain route: no dependency injection)
        query = dict(websocket.query_params)
        refused = server.refusal(websocket.headers, query)
        if refused:
            if "websocket.http.response" in websocket.scope.get("extensions", {}):
                await websocket.send_denial_response(PlainTextResponse(refused[1] + "\n", status_code=refused[0]))
            else:
                await websocket.close(1008, refused[1][:120])
            return
        await websocket.accept()
        await server.session(_ASGI(websocket), query)

    app.router.routes.append(WebSocketRoute(PATH, stt))
    return app
