"""A local speech-to-speech service speaking Nova Sonic's bidirectional event protocol, over
rejoinder's embedded models: Silero VAD + Whisper base + SmolLM2 + Piper behind the protocol.

Transport: a WebSocket at ``/model/{modelId}/invoke-with-bidirectional-stream`` carrying one
Nova Sonic event JSON per text frame, in both directions — the same event JSON the real service
carries. The real service's transport is the AWS SDK's HTTP/2 bidirectional event stream
(``InvokeModelWithBidirectionalStream``: each event base64-wrapped in a ``chunk`` frame of
``application/vnd.amazon.eventstream``, client frames SigV4-signed; shared PROTOCOLS.md §4.1); a
loopback HTTP/2+TLS server that awscrt trusts is not practical offline, so the seam is the event
stream itself (:class:`rejoinder.adapters.nova_sonic.WebSocketTransport` vs
:class:`~rejoinder.adapters.nova_sonic.BedrockTransport`). Errors are sent as one text frame
``{"exception": {"type": "validationException", "message": …}}`` (the real stream's exception
events: ``validationException``, ``modelStreamErrorException`` …) and the socket is closed.

What the service does (the model side of PROTOCOLS.md §4.3–4.4):

* the USER AUDIO content (16-bit mono LPCM, any of 8/16/24 kHz) goes through Silero VAD; the
  turn ends after ``ENDPOINT_SILENCE_MS[endpointingSensitivity]`` of silence after speech (this
  server's presets, not Nova's: HIGH 500, MEDIUM 800, LOW 1200 ms); caller speech while the
  assistant speaks is a barge-in (``textOutput`` ``{ "interrupted" : true }``, the audio content
  ends ``INTERRUPTED``);
* the utterance is transcribed (Whisper) and sent as USER TEXT (``generationStage`` FINAL);
* the LLM (the SYSTEM block as system prompt, the tools of ``promptStart``) streams; each
  speakable chunk is sent as ASSISTANT TEXT SPECULATIVE, then synthesized (Piper) and sent as
  ``audioOutput`` of ``chunk_ms``; a tool call is sent as ``toolUse`` (content end ``TOOL_USE``)
  and the LLM continues once the client's ``toolResult`` for its ``toolUseId`` arrives;
* the turn ends with the audio content (``END_TURN``), ASSISTANT TEXT FINAL (what was said) and
  ``completionEnd``. Interactive USER TEXT content is a typed turn, answered the same way.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
import logging
import re
import uuid
from http import HTTPStatus
from typing import Any, Callable

import numpy as np
import soxr

from ..adapters import nova_sonic_events as ev
from ..audio_io import resample
from ..ports import (ChatMessage, LLMPort, LLMRequest, STTPort, ServerTiming, ToolCall, ToolDecision,
                     ToolSchema, TTSPort)
from ..text import SpeakableChunker, SpeechNormalizer
from ..vad import VadTracker

log = logging.getLogger(__name__)
PATH_RE = re.compile(r"^/model/(?P<model>[^/]+)/invoke-with-bidirectional-stream$")
ENDPOINT_SILENCE_MS = {"HIGH": 500.0, "MEDIUM": 800.0, "LOW": 1200.0}
PREROLL_MS = 200.0
MAX_STEPS = 3
TOOL_RESULT_TIMEOUT_S = 15.0
MAX_MESSAGE = 1 << 20  # Nova's chunk limit: 1 MB per event


class ProtocolError(Exception):
    """The client broke the event protocol (sent back as a validationException)."""


class NovaSonicServer:
    """Serves the protocol over ``stt``, ``llm`` and ``tts`` (shared by every session) and a
    fresh VAD per session from ``vad_factory``.

    Counters (read by tests and the hosting bench): ``connections`` (WebSockets accepted),
    ``sessions`` (``sessionStart`` received), ``turns`` (caller turns answered).
    """

    def __init__(self, stt: STTPort, llm: LLMPort, tts: TTSPort, vad_factory: Callable[[], Any], *,
                 chunk_ms: float = 40.0) -> None:
        self.stt, self.llm, self.tts, self.vad_factory = stt, llm, tts, vad_factory
        self.chunk_ms = chunk_ms
        self.connections = self.sessions = self.turns = 0
        self._warm: dict[int, asyncio.Future] = {}

    def warm(self, system: str, tools: tuple[ToolSchema, ...]) -> asyncio.Future | None:
        """Prefill ``system`` and ``tools`` into the LLM's KV cache once per distinct prompt
        (sessions then reuse that prefix, as the cascade's runtime warms its agent's prompt)."""
        warm = getattr(self.llm, "warmup", None)
        if warm is None:
            return None
        key = hash((system, json.dumps([(t.name, t.description, t.parameters) for t in tools], sort_keys=True)))
        if key not in self._warm:
            self._warm[key] = asyncio.ensure_future(asyncio.to_thread(warm, system, tools))
        return self._warm[key]

    async def warmup(self) -> None:
        """Run each model once (Whisper on 0.5 s of silence, Piper on one word), as the cascade's
        runtime does before its first call."""
        async def silence():
            yield np.zeros(self.stt.sample_rate // 2, np.float32)

        async for _ in self.stt.stream(silence()):
            pass
        async for _ in self.tts.stream("Ready."):
            pass

    def process_request(self, connection, request):
        """Refuse a path other than the model's bidirectional-stream path (404)."""
        if not PATH_RE.match(request.path.split("?")[0]):
            return connection.respond(HTTPStatus.NOT_FOUND, f"no such endpoint {request.path}; use "
                                      "/model/{modelId}/invoke-with-bidirectional-stream\n")
        return None

    async def serve(self, host: str, port: int):
        """Start listening; returns the ``websockets`` server."""
        from websockets.asyncio.server import serve

        return await serve(self.handler, host, port, process_request=self.process_request,
                           max_size=MAX_MESSAGE, ping_interval=20, ping_timeout=20, compression=None)

    async def handler(self, ws) -> None:
        self.connections += 1
        session = _Session(self, ws)
        try:
            await session.run()
        except ProtocolError as exc:
            await _send_safe(ws, {"exception": {"type": "validationException", "message": str(exc)}})
            await ws.close(1008, "validation error")
        except Exception as exc:  # noqa: BLE001 — a broken client ends its own session only
            log.warning("session %s ended: %r", session.ids["sessionId"], exc)
            return
        finally:
            await session.stop()


async def _send_safe(ws, obj: dict[str, Any]) -> None:
    try:
        await ws.send(json.dumps(obj))
    except Exception:  # noqa: BLE001
        pass


class _Session:
    """One connection: the input events, VAD endpointing, and the reply task."""

    def __init__(self, server: NovaSonicServer, ws) -> None:
        self.srv, self.ws = server, ws
        self.ids = {"sessionId": uuid.uuid4().hex, "promptName": "", "completionId": ""}
        self.started = False
        self.prompt: str | None = None
        self.tools: tuple[ToolSchema, ...] = ()
        self.out_rate, self.voice = 16000, "matthew"
        self.max_tokens, self.temperature = 1024, 0.7
        self.silence_ms = ENDPOINT_SILENCE_MS["MEDIUM"]
        self.system = ""
        self.history: list[ChatMessage] = []
        self.contents: dict[str, dict[str, Any]] = {}  # open input contents by name
        self.audio_content: str | None = None
        self.in_rate = 16000
        self.tracker: VadTracker | None = None
        self.heard_ms = 0.0   # caller audio received (ms of audio)
        self.ring: list[np.ndarray] = []  # utterance audio (float32 at 16 kHz)
        self.preroll: list[np.ndarray] = []
        self.in_speech = False
        self.pause_at: float | None = None
        self.reply: asyncio.Task | None = None
        self.replying = False
        self.results: dict[str, asyncio.Future] = {}
        self.send_lock = asyncio.Lock()
        self.warm: asyncio.Task | None = None
        self.carry = ""  # transcript of a turn cut before the reply said anything

    async def send(self, obj: dict[str, Any]) -> None:
        async with self.send_lock:
            await self.ws.send(json.dumps(obj))

    async def stop(self) -> None:
        for task in (self.reply,):
            if task is not None and not task.done():
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
        forget = getattr(self.srv.llm, "forget", None)
        if forget is not None:  # the session's saved KV state is of no further use
            await asyncio.to_thread(forget, self.ids["sessionId"])

    # -- input events ---------------------------------------------------------------------------
    async def run(self) -> None:
        async for raw in self.ws:
            if isinstance(raw, bytes):
                raise ProtocolError("binary frames are not events; send each event as JSON text")
            try:
                name, body = ev.event_name(json.loads(raw))
            except ValueError:
                raise ProtocolError(f"malformed JSON: {raw[:80]!r}") from None
            except Exception as exc:  # PortError from event_name
                raise ProtocolError(str(exc)) from None
            if name not in ev.INPUT_EVENTS:
                raise ProtocolError(f"unknown input event {name!r}; known: {', '.join(ev.INPUT_EVENTS)}")
            if name == "sessionEnd":
                return
            await self.on_event(name, body)

    async def on_event(self, name: str, body: dict[str, Any]) -> None:
        if name == "sessionStart":
            self._session_start(body)
            return
        if not self.started:
            raise ProtocolError(f"{name} before sessionStart: a session starts with sessionStart")
        if name == "promptStart":
            self._prompt_start(body)
            return
        if self.prompt is None or body.get("promptName") != self.prompt:
            raise ProtocolError(f"{name}: promptName {body.get('promptName')!r} does not name the prompt "
                                "started with promptStart")
        if name == "audioInput":
            if body.get("contentName") != self.audio_content:
                raise ProtocolError("audioInput for a content that is not an open AUDIO content")
            await self._audio(body.get("content", ""))
        elif name == "contentStart":
            self._content_start(body)
        elif name in ("textInput", "toolResult"):
            c = self.contents.get(str(body.get("contentName")))
            if c is None:
                raise ProtocolError(f"{name} for a content that was not started (contentName)")
            c["text"] += str(body.get("content", ""))
        elif name == "contentEnd":
            await self._content_end(str(body.get("contentName")))
        elif name == "promptEnd":
            self.prompt = None

    def _session_start(self, body: dict[str, Any]) -> None:
        inf = body.get("inferenceConfiguration") or {}
        self.max_tokens = int(inf.get("maxTokens", self.max_tokens))
        self.temperature = float(inf.get("temperature", self.temperature))
        sens = (body.get("turnDetectionConfiguration") or {}).get("endpointingSensitivity") \
            or body.get("endpointingSensitivity") or "MEDIUM"
        if sens not in ENDPOINT_SILENCE_MS:
            raise ProtocolError(f"endpointingSensitivity must be HIGH, MEDIUM or LOW, not {sens!r}")
        self.silence_ms = ENDPOINT_SILENCE_MS[sens]
        self.started = True
        self.srv.sessions += 1

    def _prompt_start(self, body: dict[str, Any]) -> None:
        self.prompt = str(body.get("promptName") or "")
        if not self.prompt:
            raise ProtocolError("promptStart needs a promptName")
        self.ids["promptName"] = self.prompt
        audio = body.get("audioOutputConfiguration") or {}
        self.out_rate = int(audio.get("sampleRateHertz", 24000))
        if self.out_rate not in (8000, 16000, 24000):
            raise ProtocolError(f"audioOutputConfiguration.sampleRateHertz must be 8000, 16000 or 24000, "
                                f"not {self.out_rate}")
        self.voice = str(audio.get("voiceId", "matthew"))
        tools = []
        for t in (body.get("toolConfiguration") or {}).get("tools", []):
            spec = t.get("toolSpec") or {}
            try:
                schema = json.loads((spec.get("inputSchema") or {}).get("json") or "{}")
            except ValueError:
                raise ProtocolError(f"tool {spec.get('name')!r}: inputSchema.json is not JSON") from None
            tools.append(ToolSchema(str(spec.get("name")), str(spec.get("description", "")), schema))
        self.tools = tuple(tools)

    def _content_start(self, body: dict[str, Any]) -> None:
        name = str(body.get("contentName") or "")
        kind, role = body.get("type"), body.get("role")
        if not name or kind not in ("TEXT", "AUDIO", "TOOL"):
            raise ProtocolError("contentStart needs a contentName and a type of TEXT, AUDIO or TOOL")
        if kind == "AUDIO":
            cfg = body.get("audioInputConfiguration") or {}
            rate = int(cfg.get("sampleRateHertz", 16000))
            if rate not in (8000, 16000, 24000) or cfg.get("sampleSizeBits", 16) != 16 \
                    or cfg.get("channelCount", 1) != 1:
                raise ProtocolError("audioInputConfiguration must be 16-bit mono LPCM at 8000, 16000 or 24000 Hz")
            self.audio_content, self.in_rate = name, rate
            self.tracker = VadTracker(self.srv.vad_factory(), min_speech_ms=96.0)
            return
        tool_use = ((body.get("toolResultInputConfiguration") or {}).get("toolUseId")) if kind == "TOOL" else None
        if kind == "TOOL" and not tool_use:
            raise ProtocolError("a TOOL content needs toolResultInputConfiguration.toolUseId")
        self.contents[name] = {"type": kind, "role": role, "interactive": bool(body.get("interactive")),
                               "tool_use": tool_use, "text": ""}

    async def _content_end(self, name: str) -> None:
        if name == self.audio_content:
            self.audio_content = None
            return
        c = self.contents.pop(name, None)
        if c is None:
            raise ProtocolError(f"contentEnd for {name!r}, which is not an open content")
        if c["type"] == "TOOL":
            fut = self.results.get(c["tool_use"])
            if fut is not None and not fut.done():
                fut.set_result(c["text"])
        elif c["role"] == "SYSTEM":
            self.system = c["text"]
            self.warm = self.srv.warm(self.system, self.tools)
        elif c["interactive"] and c["role"] == "USER":
            self._start_reply(None, c["text"])
        elif c["role"] in ("USER", "ASSISTANT"):
            if self.history and self.history[-1].role == c["role"].lower():
                raise ProtocolError("history roles must alternate (USER, ASSISTANT, …)")
            self.history.append(ChatMessage(c["role"].lower(), c["text"]))  # type: ignore[arg-type]

    # -- caller audio: VAD endpointing and barge-in ------------------------------------------------
    async def _audio(self, data: str) -> None:
        try:
            raw = base64.b64decode(data, validate=True)
        except binascii.Error:
            raise ProtocolError("audioInput content is not valid base64") from None
        if len(raw) % 2:
            raise ProtocolError("audioInput content is not whole 16-bit samples")
        x = np.frombuffer(raw, dtype="<i2").astype(np.float32) / 32768.0
        if self.in_rate != 16000:
            x = resample(x, self.in_rate, 16000)
        assert self.tracker is not None
        t0 = self.heard_ms
        self.heard_ms += 1000.0 * len(x) / 16000
        for i in range(0, len(x), 320):  # ≤ 20 ms pieces for the tracker's buffer
            part = x[i:i + 320]
            for sig in self.tracker.push(part, t0 + 1000.0 * i / 16000):
                if sig.kind == "onset":
                    await self._onset()
                elif sig.kind == "pause":
                    self.pause_at = sig.at_ms
            self._keep(part)
        if self.in_speech and not self.tracker.speaking and self.pause_at is not None \
                and self.heard_ms - self.pause_at >= self.silence_ms:
            self.in_speech = False
            audio = np.concatenate(self.ring) if self.ring else np.zeros(0, np.float32)
            self.ring = []
            self._start_reply(audio, None)

    def _keep(self, part: np.ndarray) -> None:
        if self.in_speech:
            self.ring.append(part.copy())
        else:
            self.preroll.append(part.copy())
            if len(self.preroll) > PREROLL_MS / 20:
                self.preroll.pop(0)

    async def _onset(self) -> None:
        if not self.in_speech:
            self.in_speech = True
            self.pause_at = None
            self.ring = list(self.preroll)
        if self.replying and self.reply is not None and not self.reply.done():
            self.reply.cancel()  # barge-in: the reply task sends INTERRUPTED as it ends

    # -- the reply ----------------------------------------------------------------------------------
    def _start_reply(self, audio: np.ndarray | None, text: str | None) -> None:
        if self.reply is not None and not self.reply.done():
            self.reply.cancel()
        self.reply = asyncio.get_running_loop().create_task(self._respond(audio, text))

    async def _transcribe(self, audio: np.ndarray) -> str:
        async def one():
            yield audio if self.srv.stt.sample_rate == 16000 else resample(audio, 16000, self.srv.stt.sample_rate)

        last = None
        async for tr in self.srv.stt.stream(one()):
            last = tr
        if last is None or (last.no_speech_prob is not None and last.no_speech_prob > 0.6
                            and (last.avg_logprob or 0.0) < -1.0):  # Whisper's own silence rule
            return ""
        return last.text.strip()

    async def _respond(self, audio: np.ndarray | None, typed: str | None) -> None:
        user = typed if typed is not None else await self._transcribe(audio)  # type: ignore[arg-type]
        if not user:
            return
        if self.carry:  # a turn cut by more speech before anything was said: one turn
            user, self.carry = f"{self.carry} {user}", ""
        self.srv.turns += 1
        ids = {**self.ids, "completionId": uuid.uuid4().hex}
        await self.send(ev.out_event("completionStart", ids))
        if typed is None:
            cid = uuid.uuid4().hex
            await self.send(ev.out_content_start(ids, cid, "TEXT", "USER", "FINAL",
                                                 textOutputConfiguration={"mediaType": "text/plain"}))
            await self.send(ev.out_event("textOutput", ids, contentId=cid, content=user, role="USER"))
            await self.send(ev.out_event("contentEnd", ids, contentId=cid, type="TEXT", stopReason="PARTIAL_TURN"))
        if self.warm is not None:  # the system prompt's prefill (once per distinct prompt)
            await asyncio.gather(asyncio.shield(self.warm), return_exceptions=True)
        turn = _Reply(self, ids)
        pending = [ChatMessage("user", user)]
        stop = "END_TURN"
        self.replying = True
        try:
            for step in range(MAX_STEPS):
                calls = await turn.step(pending, final=step == MAX_STEPS - 1)
                if not calls:
                    break
                for call in calls:
                    result = await turn.tool(call)
                    pending.append(ChatMessage("assistant", "", tool_calls=(call,)))
                    pending.append(ChatMessage("tool", result, name=call.name, tool_call_id=call.id))
            await turn.flush()
        except asyncio.CancelledError:
            stop = "INTERRUPTED"
            if turn.audio is None and not turn.said.strip():
                self.carry = user  # nothing was said yet: the caller's next words continue this turn
                pending = []
            await asyncio.shield(turn.interrupted())
            raise
        finally:
            self.replying = False
            said = turn.said.strip()
            self.history.extend(m for m in pending)
            if said:
                self.history.append(ChatMessage("assistant", said))
            if stop == "END_TURN":
                await turn.end(stop)


class _Reply:
    """One assistant turn's output contents (speculative text, audio, final text)."""

    def __init__(self, s: _Session, ids: dict[str, str]) -> None:
        self.s, self.ids = s, ids
        self.chunker = SpeakableChunker()
        self.norm = SpeechNormalizer()
        self.audio: str | None = None
        self.said = ""
        self.resampler = None if s.srv.tts.sample_rate == s.out_rate else soxr.ResampleStream(
            s.srv.tts.sample_rate, s.out_rate, 1, dtype="int16")

    async def step(self, pending: list[ChatMessage], *, final: bool) -> list[ToolCall]:
        s = self.s
        messages = ((ChatMessage("system", s.system),) if s.system else ()) + tuple(s.history) + tuple(pending)
        req = LLMRequest(messages, max_tokens=s.max_tokens, temperature=s.temperature, tools=s.tools,
                         tool_choice="none" if final or not s.tools else "auto", cache_key=s.ids["sessionId"])
        calls: list[ToolCall] = []
        stream = s.srv.llm.stream(req)
        try:
            async for delta in stream:
                if isinstance(delta, (ToolDecision, ServerTiming)):  # records, not text
                    continue
                if isinstance(delta, ToolCall):
                    calls.append(delta)
                    continue
                for chunk in self.chunker.push(delta):
                    await self.speak(chunk)
        finally:
            await stream.aclose()  # type: ignore[attr-defined]
        if calls:
            for chunk in self.chunker.flush():
                await self.speak(chunk)
        return calls

    async def flush(self) -> None:
        for chunk in self.chunker.flush():
            await self.speak(chunk)

    async def speak(self, text: str) -> None:
        s, ids = self.s, self.ids
        spoken = self.norm.feed(text)
        if not spoken.strip():
            return
        cid = uuid.uuid4().hex
        await s.send(ev.out_content_start(ids, cid, "TEXT", "ASSISTANT", "SPECULATIVE",
                                          textOutputConfiguration={"mediaType": "text/plain"}))
        await s.send(ev.out_event("textOutput", ids, contentId=cid, content=text.strip(), role="ASSISTANT"))
        await s.send(ev.out_event("contentEnd", ids, contentId=cid, type="TEXT", stopReason="PARTIAL_TURN"))
        self.said += text
        step = max(1, int(s.out_rate * s.srv.chunk_ms / 1000))
        stream = s.srv.tts.stream(spoken)
        try:
            async for piece in stream:
                pcm = piece.pcm if self.resampler is None else self.resampler.resample_chunk(piece.pcm)
                if not len(pcm):
                    continue
                if self.audio is None:
                    self.audio = uuid.uuid4().hex
                    await s.send(ev.out_content_start(ids, self.audio, "AUDIO", "ASSISTANT",
                                                      audioOutputConfiguration=ev.audio_config(s.out_rate,
                                                                                               voiceId=s.voice)))
                for i in range(0, len(pcm), step):
                    await s.send(ev.out_audio(ids, self.audio, pcm[i:i + step]))
        finally:
            await stream.aclose()  # type: ignore[attr-defined]

    async def tool(self, call: ToolCall) -> str:
        s, ids = self.s, self.ids
        cid, use_id = uuid.uuid4().hex, uuid.uuid4().hex
        fut = asyncio.get_running_loop().create_future()
        s.results[use_id] = fut
        await s.send(ev.out_content_start(ids, cid, "TOOL", "TOOL",
                                          toolUseOutputConfiguration={"mediaType": "application/json"}))
        await s.send(ev.out_event("toolUse", ids, contentId=cid, toolName=call.name, toolUseId=use_id,
                                  content=json.dumps(call.arguments)))
        await s.send(ev.out_event("contentEnd", ids, contentId=cid, type="TOOL", stopReason="TOOL_USE"))
        try:
            return await asyncio.wait_for(fut, TOOL_RESULT_TIMEOUT_S)
        except TimeoutError:
            return json.dumps({"error": f"no toolResult within {TOOL_RESULT_TIMEOUT_S:.0f} s"})
        finally:
            s.results.pop(use_id, None)

    async def _final_text(self, stop: str) -> None:
        s, ids = self.s, self.ids
        if self.said.strip():
            cid = uuid.uuid4().hex
            await s.send(ev.out_content_start(ids, cid, "TEXT", "ASSISTANT", "FINAL",
                                              textOutputConfiguration={"mediaType": "text/plain"}))
            await s.send(ev.out_event("textOutput", ids, contentId=cid, content=self.said.strip(), role="ASSISTANT"))
            await s.send(ev.out_event("contentEnd", ids, contentId=cid, type="TEXT", stopReason=stop))

    async def end(self, stop: str) -> None:
        s, ids = self.s, self.ids
        if self.audio is not None:
            await s.send(ev.out_event("contentEnd", ids, contentId=self.audio, type="AUDIO", stopReason=stop))
        await self._final_text(stop)
        await s.send(ev.out_event("completionEnd", ids, stopReason=stop))

    async def interrupted(self) -> None:
        s, ids = self.s, self.ids
        try:
            cid = uuid.uuid4().hex
            await s.send(ev.out_content_start(ids, cid, "TEXT", "ASSISTANT", "FINAL",
                                              textOutputConfiguration={"mediaType": "text/plain"}))
            await s.send(ev.out_event("textOutput", ids, contentId=cid, content=ev.BARGE_IN, role="ASSISTANT"))
            await s.send(ev.out_event("contentEnd", ids, contentId=cid, type="TEXT", stopReason="INTERRUPTED"))
            await self.end("INTERRUPTED")
        except Exception:  # noqa: BLE001 — the socket may be gone
            pass
