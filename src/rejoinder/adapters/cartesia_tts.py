"""Cartesia Sonic TTS over its WebSocket (``/tts/websocket``): the real service or our server.

One socket per adapter, opened on first use and kept: each ``stream(text)`` is one context
(``context_id``) multiplexed on it, so no request pays a handshake after the first. Word timings
come from ``timestamps`` messages (``add_timestamps``). Barge-in (closing the stream before
``done``) sends ``{"context_id": …, "cancel": true}``. Wire details: shared PROTOCOLS.md §1.

Errors are :class:`~rejoinder.ports.PortError`: a refused connection, an auth failure (names
``CARTESIA_API_KEY``), an ``error`` message, a malformed frame, or the socket closing before the
context's ``done`` — including after the first audio, so the reply's recovery resumes from the
last whole word heard.

Dead sockets are replaced: one that closed or failed is reopened by the next request, and one
left *suspect* — a request was abandoned (the runtime's watchdog) before the server said anything
— must answer a WebSocket ping within ``ping_timeout_s`` (1 s) before it is used again; a
half-open socket (the peer gone without a close, e.g. a NAT or proxy dropped it) is thus replaced
at the retry instead of swallowing it too. :attr:`CartesiaTTS.reconnects` counts replacements.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from typing import Any, AsyncIterable, AsyncIterator


from ..ports import PortError, TTSAudio
from . import _cartesia

_CLOSED = object()


class _Socket:
    """One open WebSocket and the reader task that routes messages to contexts by id."""

    def __init__(self, ws: Any) -> None:
        self.ws = ws
        self.loop = asyncio.get_running_loop()
        self.queues: dict[str, asyncio.Queue] = {}
        self.failure: PortError | None = None
        self.suspect = False  # a request was abandoned before the server said anything
        self.reader = self.loop.create_task(self._read())

    @property
    def alive(self) -> bool:
        return self.failure is None and not self.reader.done()

    async def _read(self) -> None:
        from websockets.exceptions import ConnectionClosed

        try:
            async for raw in self.ws:
                try:
                    msg = json.loads(raw)
                    cid = msg.get("context_id")
                except (ValueError, AttributeError, TypeError):
                    self._fail(PortError(f"the server sent a malformed frame: {str(raw)[:80]!r}"))
                    return
                q = self.queues.get(cid) if isinstance(cid, str) else None
                if q is not None:
                    q.put_nowait(msg)
                elif msg.get("type") == "error" and cid is None:  # not tied to a context: all fail
                    self._fail(PortError(f"Cartesia error: {_cartesia.error_text(msg)}"))
                    return
            self._fail(PortError("the TTS server closed the socket"))
        except ConnectionClosed as exc:
            self._fail(PortError(f"the TTS socket dropped ({exc.__class__.__name__}: {exc})"))
        except Exception as exc:  # noqa: BLE001
            self._fail(PortError(f"the TTS socket failed: {exc!r}"))

    def _fail(self, exc: PortError) -> None:
        self.failure = exc
        for q in self.queues.values():
            q.put_nowait(_CLOSED)

    async def check(self, timeout_s: float) -> bool:
        """Ping a suspect socket: False (and the socket failed) when no pong comes within
        ``timeout_s`` — a half-open connection, whose peer is gone without a close."""
        self.suspect = False
        try:
            pong = await self.ws.ping()
            await asyncio.wait_for(pong, timeout_s)
            return True
        except Exception as exc:  # noqa: BLE001 — timeout or a dead socket: replace it
            self._fail(PortError(f"the TTS socket is half-open (no pong in {timeout_s:g} s: {exc!r})"))
            return False

    async def close(self) -> None:
        """Close a healthy socket with the closing handshake; abort a failed one at once (its
        peer is gone, and a handshake would wait for the close timeout)."""
        self.reader.cancel()
        await asyncio.gather(self.reader, return_exceptions=True)
        if self.failure is not None:
            self.ws.transport.abort()
            return
        try:
            await self.ws.close()
        except Exception:  # noqa: BLE001
            pass


class CartesiaTTS:
    """Streaming TTS over Cartesia's WebSocket protocol; int16 mono at ``sample_rate`` Hz.

    Args:
        base_url: ``wss://api.cartesia.ai`` (default; ``$CARTESIA_BASE_URL``) or our server's
            ``ws://host:port``.
        api_key: default ``$CARTESIA_API_KEY``.
        model_id: e.g. ``sonic-3``. voice_id: the voice's id.
        sample_rate: output rate requested (Hz; one of Cartesia's rates).
        language: e.g. ``en``. connect_timeout_s: connect + upgrade limit (s).

    Raises:
        ConfigError: no API key (names ``CARTESIA_API_KEY``) or a bad URL.
    """

    def __init__(self, base_url: str | None = None, api_key: str | None = None, *,
                 model_id: str = "sonic-3", voice_id: str = "a0e99841-438c-4a64-b679-ae501e7d6091",
                 sample_rate: int = 16000, language: str = "en", connect_timeout_s: float = 5.0) -> None:
        self.base_url, self._key = _cartesia.resolve(base_url, api_key)
        self.url = f"{self.base_url}/tts/websocket"
        self.model_id = model_id
        self.voice_id = voice_id
        self.sample_rate = int(sample_rate)
        self.voice_name = f"cartesia:{voice_id[:8]}"
        self.language = language
        self.connect_timeout_s = connect_timeout_s
        self._sock: _Socket | None = None
        self._lock: asyncio.Lock | None = None
        self.ping_timeout_s = 1.0  # a suspect socket must answer a ping this fast to be reused
        self.reconnects = 0

    async def connect(self) -> None:
        """Open the socket now (else the first request does), keeping the handshake off a turn."""
        await self._socket()

    async def _socket(self) -> _Socket:
        loop = asyncio.get_running_loop()
        if self._lock is None or self._sock is not None and self._sock.loop is not loop:
            self._lock, self._sock = asyncio.Lock(), None  # a new event loop: start afresh
        async with self._lock:
            if self._sock is not None and self._sock.alive and self._sock.suspect:
                await self._sock.check(self.ping_timeout_s)
            if self._sock is None or not self._sock.alive:
                self.reconnects += self._sock is not None
                old, self._sock = self._sock, None
                if old is not None:
                    await old.close()
                self._sock = _Socket(await _cartesia.connect(self.url, self._key,
                                                             timeout_s=self.connect_timeout_s))
            return self._sock

    def request(self, text: str, context_id: str, *, more: bool = False) -> dict[str, Any]:
        """The generation request sent for ``text`` (exposed for inspection and tests)."""
        return {"model_id": self.model_id, "transcript": text, "context_id": context_id,
                "voice": {"mode": "id", "id": self.voice_id}, "language": self.language,
                "output_format": {"container": "raw", "encoding": "pcm_s16le",
                                  "sample_rate": self.sample_rate},
                "add_timestamps": True, "continue": more, "max_buffer_delay_ms": 0}

    async def stream(self, text: str) -> AsyncIterator[TTSAudio]:
        """Synthesize one text chunk on a new context; yields audio as it arrives.

        Raises:
            PortError: see the module docstring.
        """
        if not text.strip():
            return

        async def one():
            yield text

        async for piece in self.stream_many(one()):
            yield piece

    async def stream_many(self, texts: AsyncIterable[str]) -> AsyncIterator[TTSAudio]:
        """Synthesize several text chunks on ONE context (Cartesia's continuation: ``continue:
        true`` on all but the last), sending each as soon as ``texts`` yields it, so the server
        can start the next while the previous still streams. Word times are relative to each
        piece's first sample (see :class:`~rejoinder.adapters._cartesia.WordTimeline`).

        Raises:
            PortError: see the module docstring.
        """
        sock = await self._socket()
        cid = uuid.uuid4().hex
        queue: asyncio.Queue = asyncio.Queue()
        sock.queues[cid] = queue
        finished = False
        sender = asyncio.get_running_loop().create_task(self._send_all(sock, cid, texts, queue))
        words = _cartesia.WordTimeline(self.sample_rate)
        heard = False
        try:
            while True:
                msg = await queue.get()
                heard = True
                if msg is _CLOSED:
                    raise sock.failure or PortError("the TTS socket closed")
                if isinstance(msg, BaseException):
                    raise msg
                kind = msg.get("type")
                if kind == "chunk":
                    yield words.piece(_cartesia.decode_chunk(msg, self.url))
                elif kind == "timestamps":
                    words.add(msg)
                elif kind == "done" or (msg.get("done") is True and kind != "error"):
                    finished = True
                    rest = words.rest()  # timings that arrived after the audio they describe
                    if rest is not None:
                        yield rest
                    return
                elif kind == "error":
                    finished = True
                    raise PortError(f"Cartesia error: {_cartesia.error_text(msg)}")
        finally:
            sock.queues.pop(cid, None)
            sender.cancel()
            await asyncio.gather(sender, return_exceptions=True)
            if not heard:  # abandoned (a watchdog) before any answer: the socket may be dead
                sock.suspect = True
            if not finished and sock.alive:  # barge-in or a watchdog: stop the server's work
                try:
                    await sock.ws.send(json.dumps({"context_id": cid, "cancel": True}))
                except Exception:  # noqa: BLE001 — the socket is going anyway
                    pass

    async def _send_all(self, sock: _Socket, cid: str, texts: AsyncIterable[str],
                        queue: asyncio.Queue) -> None:
        try:
            prev: str | None = None
            async for text in texts:
                if prev is not None:
                    await sock.ws.send(json.dumps(self.request(prev, cid, more=True)))
                prev = text
            await sock.ws.send(json.dumps(self.request(prev or "", cid, more=False)))
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001
            queue.put_nowait(PortError(f"cannot send to the TTS socket: {exc!r}"))

    async def aclose(self) -> None:
        """Close the socket (if this event loop opened it)."""
        sock, self._sock = self._sock, None
        if sock is not None and sock.loop is asyncio.get_running_loop():
            await sock.close()
