"""STT and TTS behind SageMaker bidirectional streaming (``InvokeEndpointWithBidirectionalStream``).

Unlike the response stream (:mod:`rejoinder.adapters.sagemaker_tts`: one signed HTTP request per
utterance, audio one way), a bidirectional stream is one long-lived connection with frames both
ways: caller audio streams up while transcripts come down, and a TTS connection serves utterance
after utterance. Each adapter keeps a pool of open connections (one per utterance in flight;
an idle one is reused), speaking the container protocol of
:mod:`rejoinder.hosting.sagemaker_bidi_server`.

Two ways to reach the container, the same frames:

* ``url`` ``ws://host:port`` — the container's WebSocket (``/invocations-bidirectional-stream``)
  directly: a local endpoint, or the same image on EC2/ECS;
* ``endpoint_name`` without ``url`` — SageMaker itself, through the AWS SDK for Python
  (``aws_sdk_sagemaker_runtime_http2``, HTTP/2 on port 8443, each frame one ``PayloadPart`` with
  ``DataType`` UTF8 or BINARY; Python ≥ 3.12; ``pip install 'rejoinder[aws-s2s]'``).

Errors are :class:`~rejoinder.ports.PortError`: a refused connection, an ``error`` frame, a
connection that dies mid-utterance (after the first audio too: the runtime then resumes the reply
from the last whole word heard, from the word timestamps sent ahead of the audio), a malformed
frame. Barge-in closes the utterance's connection (it is not reused).
"""

from __future__ import annotations

import asyncio
import json
import os
from typing import Any, AsyncIterable, AsyncIterator

import numpy as np

from ..errors import ConfigError, MissingExtra
from ..ports import PortError, Transcript, TTSAudio
from ._cartesia import WordTimeline

PATH = "/invocations-bidirectional-stream"


class _WebSocket:
    """One connection straight to the container."""

    def __init__(self, url: str, timeout_s: float) -> None:
        self.url, self.timeout_s, self.ws = url, timeout_s, None

    async def open(self) -> None:
        from websockets.asyncio.client import connect
        from websockets.exceptions import InvalidStatus, WebSocketException

        try:
            self.ws = await asyncio.wait_for(connect(self.url, max_size=1 << 20, open_timeout=None,
                                                     compression=None, ping_interval=60, ping_timeout=300),
                                             self.timeout_s)
        except InvalidStatus as exc:
            raise PortError(f"{self.url}: the container refused the WebSocket with HTTP "
                            f"{exc.response.status_code}") from None
        except (OSError, TimeoutError, WebSocketException) as exc:
            raise PortError(f"{self.url}: cannot connect ({type(exc).__name__}: {exc})") from None

    async def send(self, frame: str | bytes) -> None:
        from websockets.exceptions import ConnectionClosed

        try:
            await self.ws.send(frame)
        except ConnectionClosed as exc:
            raise PortError(f"{self.url}: the connection closed ({exc})") from None

    async def recv(self) -> str | bytes:
        from websockets.exceptions import ConnectionClosed

        try:
            return await self.ws.recv()
        except ConnectionClosed as exc:
            raise PortError(f"{self.url}: the connection died mid-stream ({exc})") from None

    async def close(self) -> None:
        if self.ws is not None:
            await self.ws.close()


class _SageMakerStream:
    """One ``InvokeEndpointWithBidirectionalStream`` through the AWS SDK (PROTOCOLS.md §3.5)."""

    def __init__(self, endpoint_name: str, region: str, query: str) -> None:
        try:
            import aws_sdk_sagemaker_runtime_http2  # noqa: F401
        except ImportError as exc:
            raise MissingExtra("the AWS SDK for SageMaker bidirectional streaming "
                               "(aws-sdk-sagemaker-runtime-http2, Python >= 3.12)", "rejoinder[aws-s2s]") from exc
        self.endpoint_name, self.region, self.query = endpoint_name, region, query
        self.url = f"https://runtime.sagemaker.{region}.amazonaws.com:8443/endpoints/{endpoint_name}" \
                   "/invocations-bidirectional-stream"
        self._stream: Any = None
        self._out: Any = None

    async def open(self) -> None:
        from aws_sdk_sagemaker_runtime_http2.client import SageMakerRuntimeHTTP2Client
        from aws_sdk_sagemaker_runtime_http2.config import Config
        from aws_sdk_sagemaker_runtime_http2.models import InvokeEndpointWithBidirectionalStreamInput
        from smithy_aws_core.identity import EnvironmentCredentialsResolver

        client = SageMakerRuntimeHTTP2Client(Config(
            endpoint_uri=f"https://runtime.sagemaker.{self.region}.amazonaws.com:8443", region=self.region,
            aws_credentials_identity_resolver=EnvironmentCredentialsResolver()))
        try:
            self._stream = await client.invoke_endpoint_with_bidirectional_stream(
                InvokeEndpointWithBidirectionalStreamInput(endpoint_name=self.endpoint_name,
                                                           model_query_string=self.query))
            self._out = (await self._stream.await_output())[1]
        except Exception as exc:  # noqa: BLE001 — the SDK's error types vary by version
            raise PortError(f"{self.url}: cannot open the stream ({type(exc).__name__}: {exc})") from None

    async def send(self, frame: str | bytes) -> None:
        from aws_sdk_sagemaker_runtime_http2.models import RequestPayloadPart, RequestStreamEventPayloadPart

        text = isinstance(frame, str)
        part = RequestPayloadPart(bytes_=frame.encode("utf-8") if text else frame,
                                  data_type="UTF8" if text else "BINARY")
        try:
            await self._stream.input_stream.send(RequestStreamEventPayloadPart(value=part))
        except Exception as exc:  # noqa: BLE001
            raise PortError(f"{self.url}: send failed ({type(exc).__name__}: {exc})") from None

    async def recv(self) -> str | bytes:
        try:
            item = await self._out.receive()
        except Exception as exc:  # noqa: BLE001 — ModelStreamError / InternalStreamFailure
            raise PortError(f"{self.url}: {type(exc).__name__}: {exc}") from None
        if item is None:
            raise PortError(f"{self.url}: the stream ended")
        part = item.value
        return part.bytes_.decode("utf-8") if getattr(part, "data_type", "BINARY") == "UTF8" else part.bytes_

    async def close(self) -> None:
        if self._stream is not None:
            try:
                await self._stream.input_stream.close()
            except Exception:  # noqa: BLE001
                pass


class _Pool:
    """Open connections to one container; an idle one is reused for the next utterance."""

    def __init__(self, stage: str, url: str | None, endpoint_name: str | None, region: str | None,
                 timeout_s: float) -> None:
        region = region or os.environ.get("AWS_REGION") or "us-east-1"
        if url:
            if not url.startswith(("ws://", "wss://")):
                raise ConfigError(f"the bidirectional endpoint URL must start with ws:// or wss://, got {url!r}")
            self.endpoint = f"{url.rstrip('/')}{PATH}?model={stage}"
            self._make = lambda: _WebSocket(self.endpoint, timeout_s)
        elif endpoint_name:
            self.endpoint = f"sagemaker:{endpoint_name}@{region}"
            self._make = lambda: _SageMakerStream(endpoint_name, region, f"model={stage}")
        else:
            raise ConfigError(f"the sagemaker-bidi {stage.upper()} needs stack.sagemaker_bidi.{stage}_url "
                              f"(a container's ws://host:port) or .{stage}_endpoint (a SageMaker endpoint)")
        self._idle: list[Any] = []
        self.opened = 0

    async def take(self) -> Any:
        if self._idle:
            return self._idle.pop()
        sock = self._make()
        await sock.open()
        self.opened += 1
        return sock

    def give(self, sock: Any) -> None:
        self._idle.append(sock)

    async def warm(self) -> None:
        if not self._idle:
            self.give(await self.take())

    async def aclose(self) -> None:
        idle, self._idle = self._idle, []
        for s in idle:
            await s.close()


def _json(frame: str | bytes, where: str) -> dict[str, Any]:
    try:
        msg = json.loads(frame)
    except ValueError:
        raise PortError(f"{where}: malformed JSON frame: {str(frame)[:80]!r}") from None
    if not isinstance(msg, dict):
        raise PortError(f"{where}: a JSON frame that is not an object")
    return msg


class SageMakerBidiTTS:
    """TTS over a bidirectional stream (int16 mono at ``sample_rate`` Hz)."""

    def __init__(self, url: str | None = None, endpoint_name: str | None = None, region: str | None = None, *,
                 sample_rate: int = 16000, timeout_s: float = 10.0) -> None:
        self.pool = _Pool("tts", url, endpoint_name, region, timeout_s)
        self.sample_rate = int(sample_rate)
        self.voice_name = f"sagemaker-bidi:{self.pool.endpoint}"

    async def connect(self) -> None:
        """Open one connection ahead of the first utterance."""
        await self.pool.warm()

    async def stream(self, text: str) -> AsyncIterator[TTSAudio]:
        """Synthesize ``text``; yields audio as binary frames arrive.

        Raises:
            PortError: see the module docstring.
        """
        if not text.strip():
            return
        sock = await self.pool.take()
        where = self.pool.endpoint
        reuse = False
        words = WordTimeline(self.sample_rate)
        try:
            await sock.send(json.dumps({"type": "speak", "text": text, "sample_rate": self.sample_rate}))
            while True:
                frame = await sock.recv()
                if isinstance(frame, bytes):
                    if len(frame) % 2:
                        raise PortError(f"{where}: an audio frame of {len(frame)} bytes is not whole int16 samples")
                    yield words.piece(np.frombuffer(frame, dtype="<i2").astype(np.int16))
                    continue
                msg = _json(frame, where)
                kind = msg.get("type")
                if kind == "timestamps":
                    words.add(msg)
                elif kind == "done":
                    reuse = True
                    rest = words.rest()
                    if rest is not None:
                        yield rest
                    return
                elif kind == "error":
                    reuse = True
                    raise PortError(f"{where}: the container reported an error: {msg.get('message')}")
        finally:
            if reuse:
                self.pool.give(sock)
            else:  # cut short (barge-in) or broken: not reused
                await sock.close()

    async def aclose(self) -> None:
        await self.pool.aclose()


class SageMakerBidiSTT:
    """STT over a bidirectional stream: caller audio (float32 at ``sample_rate``) streams up as
    binary int16 frames while it is spoken; the final transcript comes back on ``finalize``."""

    def __init__(self, url: str | None = None, endpoint_name: str | None = None, region: str | None = None, *,
                 sample_rate: int = 16000, timeout_s: float = 10.0) -> None:
        self.pool = _Pool("stt", url, endpoint_name, region, timeout_s)
        self.sample_rate = int(sample_rate)

    async def connect(self) -> None:
        await self.pool.warm()

    async def stream(self, audio: AsyncIterable[np.ndarray]) -> AsyncIterator[Transcript]:
        """Transcribe one utterance.

        Raises:
            PortError: see the module docstring.
        """
        sock = await self.pool.take()
        where = self.pool.endpoint
        reuse = False
        try:
            await sock.send(json.dumps({"type": "start", "sample_rate": self.sample_rate}))
            async for chunk in audio:
                x = np.clip(np.asarray(chunk, dtype=np.float32), -1.0, 1.0)
                await sock.send((x * 32767.0).astype("<i2").tobytes())
            await sock.send(json.dumps({"type": "finalize"}))
            while True:
                msg = _json(await sock.recv(), where)
                if msg.get("type") == "transcript":
                    reuse = True
                    words = tuple((str(w["word"]), 1000.0 * float(w["start"]), 1000.0 * float(w["end"]))
                                  for w in msg.get("words") or [])
                    yield Transcript(str(msg.get("text", "")), True, words, msg.get("no_speech_prob"),
                                     msg.get("avg_logprob"))
                    return
                if msg.get("type") == "error":
                    reuse = True
                    raise PortError(f"{where}: the container reported an error: {msg.get('message')}")
        finally:
            if reuse:
                self.pool.give(sock)
            else:
                await sock.close()

    async def aclose(self) -> None:
        await self.pool.aclose()
