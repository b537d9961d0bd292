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
"""

from __future__ import annotations

import asyncio
import json
import uuid
from http import HTTPStatus
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

    def process_request(self, connection, request):
        """Refuse a wrong path (404), a bad key (401) or a bad query parameter (400)."""
        url = urlsplit(request.path)
        if url.path != PATH:
            return connection.respond(HTTPStatus.NOT_FOUND, f"no such endpoint {url.path}; use {PATH}\n")
        query = dict(parse_qsl(url.query))
        if not key_matches(self.api_key, bearer_or_key(request.headers, query)):
            return connection.respond(HTTPStatus.UNAUTHORIZED, "invalid or missing API key (send X-API-Key)\n")
        problem = self._check_query(query)
        if problem:
            return connection.respond(HTTPStatus.BAD_REQUEST, problem + "\n")
        return None

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
        query = dict(parse_qsl(urlsplit(ws.request.path).query))
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
                ws.transport.abort()
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
