"""A model container under SageMaker's bidirectional-streaming contract, serving an embedded STT
(Whisper) or TTS (Piper / espeak).

The contract (shared PROTOCOLS.md §3.5; AWS SageMaker Developer Guide, "Custom inference code with
hosting services"): the container serves a **WebSocket** at ``/invocations-bidirectional-stream``
(port 8080 on SageMaker; the ``X-Amzn-SageMaker-Model-Invocation-Path`` / ``-Model-Query-String``
headers of ``InvokeEndpointWithBidirectionalStream`` can change path and query) and ``GET /ping``
(200). SageMaker maps each request ``PayloadPart`` to one WebSocket frame and back — ``DataType``
UTF8 ↔ text frame, BINARY ↔ binary frame, PARTIAL…COMPLETE ↔ a fragmented message — and never
merges or splits; a close frame from the container reaches the client as ``ModelStreamError``.
So the same container runs on EC2/ECS or here and the client speaks WebSocket to it directly.

What travels in the frames is the container's own protocol. This one (documented for both
stages; one utterance at a time per connection, many utterances per connection):

TTS (``?model=tts``)
    client text ``{"type": "speak", "text": …, "sample_rate": 16000}``; server text
    ``{"type": "timestamps", "word_timestamps": {"words", "start", "end"}}`` (s from the start of
    the utterance, sent before the audio that holds them), **binary** frames of int16 LE mono PCM
    (``chunk_ms`` each), then text ``{"type": "done"}``; client text ``{"type": "cancel"}`` stops
    the utterance (answered by ``done``).
STT (``?model=stt``)
    client text ``{"type": "start", "sample_rate": 16000}``, **binary** frames of int16 LE mono
    PCM, text ``{"type": "finalize"}``; server text ``{"type": "transcript", "text", "is_final":
    true, "words": [{word, start, end}], "no_speech_prob", "avg_logprob"}``.

Errors: text ``{"type": "error", "message": …}`` (the socket stays open); a malformed frame gets
one too. Server-side faults (``--faults``, :mod:`rejoinder.hosting.wire`): ``drop`` aborts the
connection after N audio frames (a mid-stream failure), ``error`` sends an error message instead.
"""

from __future__ import annotations

import asyncio
import json
from http import HTTPStatus
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import numpy as np
import soxr

from ..audio_io import resample
from .wire import ServerFaults, due_fault

PATH = "/invocations-bidirectional-stream"
PING = "/ping"
MAX_MESSAGE = 1 << 20
MAX_BUFFER_S = 120.0


class BidiContainer:
    """Serves one ``stage`` (``"stt"`` or ``"tts"``) of ``model`` (an STT or TTS port).

    Counters: ``connections`` (WebSockets accepted), ``utterances`` (requests served)."""

    def __init__(self, stage: str, model: Any, *, faults: ServerFaults | None = None,
                 chunk_ms: float = 40.0) -> None:
        if stage not in ("stt", "tts"):
            raise ValueError(f"a bidirectional container serves stt or tts, not {stage!r}")
        self.stage, self.model = stage, model
        self.faults = faults or ServerFaults()
        self.chunk_ms = chunk_ms
        self.connections = self.utterances = 0

    def process_request(self, connection, request):
        """``GET /ping`` → 200; another path → 404; ``?model=`` naming the other stage → 400."""
        url = urlsplit(request.path)
        if url.path == PING:
            return connection.respond(HTTPStatus.OK, "ok\n")
        if url.path != PATH:
            return connection.respond(HTTPStatus.NOT_FOUND, f"no such path {url.path}; use {PATH}\n")
        model = dict(parse_qsl(url.query)).get("model")
        if model and model != self.stage:
            return connection.respond(HTTPStatus.BAD_REQUEST, f"this container serves model={self.stage}, "
                                      f"not {model!r}\n")
        return None

    async def serve(self, host: str, port: int):
        from websockets.asyncio.server import serve

        return await serve(self.handler, host, port, process_request=self.process_request,
                           max_size=MAX_MESSAGE, ping_interval=60, ping_timeout=300, compression=None)

    async def handler(self, ws) -> None:
        self.connections += 1
        try:
            if self.stage == "tts":
                await self._tts(ws)
            else:
                await self._stt(ws)
        except _Abort:
            return
        except Exception:  # noqa: BLE001 — a broken client ends its own socket only
            return

    @staticmethod
    async def _error(ws, message: str) -> None:
        await ws.send(json.dumps({"type": "error", "message": message}))

    @staticmethod
    def _command(raw: Any) -> dict[str, Any] | None:
        if isinstance(raw, bytes):
            return None
        try:
            msg = json.loads(raw)
        except ValueError:
            return None
        return msg if isinstance(msg, dict) else None

    # -- TTS ------------------------------------------------------------------------------------
    async def _tts(self, ws) -> None:
        speaking: asyncio.Task | None = None
        async for raw in ws:
            msg = self._command(raw)
            if msg is None:
                await self._error(ws, "send JSON text frames: {\"type\": \"speak\", \"text\": …}")
                continue
            if msg.get("type") == "cancel":
                if speaking is not None and not speaking.done():
                    speaking.cancel()
                continue
            if msg.get("type") != "speak" or not isinstance(msg.get("text"), str):
                await self._error(ws, f"unknown command {str(msg)[:60]}; send speak or cancel")
                continue
            rate = int(msg.get("sample_rate", 16000))
            if not 8000 <= rate <= 48000:
                await self._error(ws, f"sample_rate {rate} is outside 8000..48000 Hz")
                continue
            if speaking is not None and not speaking.done():
                await self._error(ws, "one utterance at a time per connection: wait for done")
                continue
            speaking = asyncio.get_running_loop().create_task(self._speak(ws, msg["text"], rate))
        if speaking is not None:
            speaking.cancel()

    async def _speak(self, ws, text: str, rate: int) -> None:
        self.utterances += 1
        faults = self.faults.draw()
        src = self.model.sample_rate
        resampler = None if src == rate else soxr.ResampleStream(src, rate, 1, dtype="int16")
        step = max(1, int(rate * self.chunk_ms / 1000))
        sent, offset_s = 0, 0.0
        stream = self.model.stream(text)
        try:
            async for piece in stream:
                if piece.words:
                    w = [(x, offset_s + a / 1000.0, offset_s + b / 1000.0) for x, a, b in piece.words]
                    await ws.send(json.dumps({"type": "timestamps", "word_timestamps": {
                        "words": [x for x, _, _ in w], "start": [round(a, 4) for _, a, _ in w],
                        "end": [round(b, 4) for _, _, b in w]}}))
                offset_s += len(piece.pcm) / src
                pcm = piece.pcm if resampler is None else resampler.resample_chunk(piece.pcm)
                for i in range(0, len(pcm), step):
                    kind = await due_fault(faults, sent)
                    if kind == "drop":
                        ws.transport.abort()  # the connection dies without a close frame
                        raise _Abort()
                    if kind in ("error", "garbage"):
                        await self._error(ws, "injected mid-stream error")
                        return
                    await ws.send(pcm[i:i + step].astype("<i2", copy=False).tobytes())
                    sent += 1
            await ws.send(json.dumps({"type": "done"}))
        except asyncio.CancelledError:
            try:
                await ws.send(json.dumps({"type": "done", "cancelled": True}))
            except Exception:  # noqa: BLE001 — the client may have gone
                pass
        except _Abort:
            return  # the injected drop ended this connection
        except Exception:  # noqa: BLE001 — the client went away mid-utterance
            return
        finally:
            await stream.aclose()  # type: ignore[attr-defined]

    # -- STT ------------------------------------------------------------------------------------
    async def _stt(self, ws) -> None:
        rate: int | None = None
        chunks: list[np.ndarray] = []
        held = 0
        async for raw in ws:
            if isinstance(raw, bytes):
                if rate is None:
                    await self._error(ws, "send {\"type\": \"start\", \"sample_rate\": …} before audio")
                    continue
                if len(raw) % 2:
                    await self._error(ws, f"{len(raw)} bytes is not whole int16 samples")
                    continue
                if held + len(raw) // 2 > MAX_BUFFER_S * rate:
                    await self._error(ws, f"more than {MAX_BUFFER_S:.0f} s of audio without finalize")
                    continue
                chunks.append(np.frombuffer(raw, dtype="<i2").astype(np.float32) / 32768.0)
                held += len(raw) // 2
                continue
            msg = self._command(raw) or {}
            kind = msg.get("type")
            if kind == "start":
                rate = int(msg.get("sample_rate", 16000))
                chunks, held = [], 0
            elif kind == "finalize" and rate is not None:
                audio = np.concatenate(chunks) if chunks else np.zeros(0, np.float32)
                chunks, held = [], 0
                await self._final(ws, audio, rate)
            else:
                await self._error(ws, f"unknown command {str(raw)[:60]!r}; send start, audio, finalize")

    async def _final(self, ws, audio: np.ndarray, rate: int) -> None:
        self.utterances += 1
        for f in self.faults.draw():
            if f.kind == "drop":
                ws.transport.abort()
                raise _Abort()
            if f.kind in ("error", "garbage"):
                await self._error(ws, "injected transcription error")
                return
            if f.kind in ("stall", "slow"):
                await asyncio.sleep(f.value_ms / 1000.0)
        x = audio if rate == self.model.sample_rate else resample(audio, rate, self.model.sample_rate)

        async def one():
            yield x

        last = None
        if len(x):
            async for tr in self.model.stream(one()):
                last = tr
        await ws.send(json.dumps({
            "type": "transcript", "is_final": True, "text": last.text if last else "",
            "words": [{"word": w, "start": round(a / 1000.0, 3), "end": round(b / 1000.0, 3)}
                      for w, a, b in (last.words if last else ())],
            "no_speech_prob": last.no_speech_prob if last else None,
            "avg_logprob": last.avg_logprob if last else None}))


class _Abort(Exception):
    """An injected fault ended the connection."""
