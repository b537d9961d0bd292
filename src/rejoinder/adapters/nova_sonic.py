"""Amazon Nova Sonic (speech to speech) over its bidirectional event protocol.

One :class:`NovaSonicStream` per call: :meth:`NovaSonic.open` sends ``sessionStart``,
``promptStart`` (output formats and the agent's tools), the agent's instructions as the SYSTEM
block and opens the USER AUDIO content; then caller audio goes in as ``audioInput`` events and the
model's events come out (:mod:`rejoinder.adapters.nova_sonic_events`). The adapter only speaks the
protocol: it never times itself and never runs tools — :mod:`rejoinder.s2s` stamps every boundary
from the events as they arrive and runs the agent's tools.

Two transports carry the same event JSON:

* :class:`WebSocketTransport` — one event per WebSocket text frame, to ``ws://host:port/model/
  {modelId}/invoke-with-bidirectional-stream`` (rejoinder's local service,
  :mod:`rejoinder.hosting.nova_sonic_server`, or any bridge speaking it);
* :class:`BedrockTransport` — the real service: Bedrock ``InvokeModelWithBidirectionalStream``
  through the AWS SDK for Python (``aws_sdk_bedrock_runtime``, smithy-python, HTTP/2 event stream,
  SigV4; Python ≥ 3.12; ``pip install 'rejoinder[aws-s2s]'``), credentials from the environment
  (``AWS_ACCESS_KEY_ID`` / ``AWS_SECRET_ACCESS_KEY`` / ``AWS_SESSION_TOKEN``).

Errors are :class:`~rejoinder.ports.PortError`: a refused connection, a malformed event, an
exception event from the service (``validationException``, ``modelStreamErrorException`` …).
"""

from __future__ import annotations

import asyncio
import json
import os
import uuid
from typing import Any, AsyncIterator, Protocol

import numpy as np

from ..errors import ConfigError, MissingExtra
from ..ports import PortError, ToolSchema
from . import nova_sonic_events as ev

DEFAULT_MODEL = "amazon.nova-2-sonic-v1:0"
EXCEPTIONS = ("exception", "internalServerException", "modelStreamErrorException", "validationException",
              "throttlingException", "modelTimeoutException", "serviceUnavailableException")


class Transport(Protocol):
    """Carries Nova Sonic event JSON both ways for one session."""

    endpoint: str

    async def open(self) -> None: ...

    async def send(self, event: dict[str, Any]) -> None: ...

    def receive(self) -> AsyncIterator[dict[str, Any]]: ...

    async def aclose(self) -> None: ...


def _check_exception(event: dict[str, Any], where: str) -> None:
    for name in EXCEPTIONS:
        if name in event and "event" not in event:
            body = event[name] if isinstance(event[name], dict) else {}
            kind = body.get("type", name)
            raise PortError(f"{where}: {kind}: {body.get('message') or body.get('originalMessage') or body}")


class WebSocketTransport:
    """Events as WebSocket text frames (the local service's transport; see module docstring)."""

    def __init__(self, base_url: str, model_id: str, *, timeout_s: float = 10.0) -> None:
        if not base_url.startswith(("ws://", "wss://")):
            raise ConfigError(f"the Nova Sonic WebSocket base URL must start with ws:// or wss://, got {base_url!r}")
        self.endpoint = f"{base_url.rstrip('/')}/model/{model_id}/invoke-with-bidirectional-stream"
        self.timeout_s = timeout_s
        self._ws: Any = None

    async def open(self) -> None:
        from websockets.asyncio.client import connect
        from websockets.exceptions import InvalidStatus, WebSocketException

        try:
            self._ws = await asyncio.wait_for(connect(self.endpoint, max_size=1 << 20, open_timeout=None,
                                                      compression=None, ping_interval=20, ping_timeout=20),
                                              self.timeout_s)
        except InvalidStatus as exc:
            raise PortError(f"{self.endpoint}: the server refused the WebSocket upgrade with HTTP "
                            f"{exc.response.status_code}") from None
        except (OSError, TimeoutError, WebSocketException) as exc:
            raise PortError(f"{self.endpoint}: cannot connect ({type(exc).__name__}: {exc})") from None

    async def send(self, event: dict[str, Any]) -> None:
        from websockets.exceptions import ConnectionClosed

        try:
            await self._ws.send(json.dumps(event))
        except ConnectionClosed as exc:
            raise PortError(f"{self.endpoint}: the connection closed ({exc})") from None

    async def receive(self) -> AsyncIterator[dict[str, Any]]:
        from websockets.exceptions import ConnectionClosed, ConnectionClosedOK

        try:
            async for raw in self._ws:
                try:
                    event = json.loads(raw)
                except ValueError:
                    raise PortError(f"{self.endpoint}: malformed JSON event: {str(raw)[:80]!r}") from None
                _check_exception(event, self.endpoint)
                yield event
        except ConnectionClosedOK:
            return
        except ConnectionClosed as exc:
            raise PortError(f"{self.endpoint}: the connection died mid-session ({exc})") from None

    async def aclose(self) -> None:
        if self._ws is not None:
            await self._ws.close()
            self._ws = None


class BedrockTransport:
    """The real service: ``InvokeModelWithBidirectionalStream`` through ``aws_sdk_bedrock_runtime``
    (PROTOCOLS.md §4.1; the calls follow the SDK's documented client API).

    Raises:
        MissingExtra: the AWS SDK is not installed (needs Python ≥ 3.12).
        ConfigError: no AWS credentials in the environment.
    """

    def __init__(self, model_id: str, region: str | None = None) -> None:
        try:
            import aws_sdk_bedrock_runtime  # noqa: F401
        except ImportError as exc:
            raise MissingExtra("the AWS SDK for Nova Sonic (aws-sdk-bedrock-runtime, Python >= 3.12)",
                               "rejoinder[aws-s2s]") from exc
        if not (os.environ.get("AWS_ACCESS_KEY_ID") and os.environ.get("AWS_SECRET_ACCESS_KEY")):
            raise ConfigError("Nova Sonic over AWS needs credentials: set AWS_ACCESS_KEY_ID and "
                              "AWS_SECRET_ACCESS_KEY (and AWS_SESSION_TOKEN for temporary ones)")
        self.model_id = model_id
        self.region = region or os.environ.get("AWS_REGION") or "us-east-1"
        self.endpoint = f"https://bedrock-runtime.{self.region}.amazonaws.com/model/{model_id}/" \
                        "invoke-with-bidirectional-stream"
        self._stream: Any = None
        self._out: Any = None

    async def open(self) -> None:
        from aws_sdk_bedrock_runtime.client import BedrockRuntimeClient
        from aws_sdk_bedrock_runtime.config import Config
        from aws_sdk_bedrock_runtime.models import InvokeModelWithBidirectionalStreamOperationInput
        from smithy_aws_core.identity import EnvironmentCredentialsResolver

        client = BedrockRuntimeClient(Config(
            endpoint_uri=f"https://bedrock-runtime.{self.region}.amazonaws.com", region=self.region,
            aws_credentials_identity_resolver=EnvironmentCredentialsResolver()))
        try:
            self._stream = await client.invoke_model_with_bidirectional_stream(
                InvokeModelWithBidirectionalStreamOperationInput(model_id=self.model_id))
            self._out = (await self._stream.await_output())[1]
        except Exception as exc:  # noqa: BLE001 — the SDK's error types vary by version
            raise PortError(f"{self.endpoint}: cannot open the stream ({type(exc).__name__}: {exc})") from None

    async def send(self, event: dict[str, Any]) -> None:
        from aws_sdk_bedrock_runtime.models import (BidirectionalInputPayloadPart,
                                                    InvokeModelWithBidirectionalStreamInputChunk)

        chunk = InvokeModelWithBidirectionalStreamInputChunk(
            value=BidirectionalInputPayloadPart(bytes_=json.dumps(event).encode("utf-8")))
        try:
            await self._stream.input_stream.send(chunk)
        except Exception as exc:  # noqa: BLE001
            raise PortError(f"{self.endpoint}: send failed ({type(exc).__name__}: {exc})") from None

    async def receive(self) -> AsyncIterator[dict[str, Any]]:
        while True:
            try:
                item = await self._out.receive()
            except Exception as exc:  # noqa: BLE001 — exception events surface as SDK errors
                raise PortError(f"{self.endpoint}: {type(exc).__name__}: {exc}") from None
            if item is None:
                return
            raw = getattr(getattr(item, "value", None), "bytes_", None)
            if raw:
                yield json.loads(raw.decode("utf-8"))

    async def aclose(self) -> None:
        if self._stream is not None:
            try:
                await self._stream.input_stream.close()
            except Exception:  # noqa: BLE001
                pass
            self._stream = None


class NovaSonic:
    """The speech-to-speech service. ``base_url`` ``ws://…``: the WebSocket transport (local);
    None: the real service through the AWS SDK.

    Args:
        model_id: default ``amazon.nova-2-sonic-v1:0``. voice: ``voiceId``. endpointing:
            ``endpointingSensitivity`` HIGH | MEDIUM | LOW. input_rate / output_rate: Hz (LPCM
            16-bit mono; 8000, 16000 or 24000). region: AWS region (real service).

    Raises:
        ConfigError: a bad endpointing value or sample rate.
    """

    provider = "nova-sonic"

    def __init__(self, base_url: str | None = None, *, model_id: str = DEFAULT_MODEL, voice: str = "matthew",
                 endpointing: str = "MEDIUM", input_rate: int = 16000, output_rate: int = 16000,
                 region: str | None = None, timeout_s: float = 10.0) -> None:
        if endpointing not in ev.ENDPOINTING:
            raise ConfigError(f"endpointing must be one of {', '.join(ev.ENDPOINTING)}, not {endpointing!r}")
        for r in (input_rate, output_rate):
            if r not in (8000, 16000, 24000):
                raise ConfigError(f"Nova Sonic audio is 8000, 16000 or 24000 Hz, not {r}")
        self.base_url = base_url or os.environ.get("REJOINDER_NOVA_SONIC_URL")
        self.model_id, self.voice, self.endpointing = model_id, voice, endpointing
        self.input_rate, self.output_rate = input_rate, output_rate
        self.region, self.timeout_s = region, timeout_s
        self.model_name = f"nova-sonic:{model_id}"

    def transport(self) -> Transport:
        if self.base_url:
            return WebSocketTransport(self.base_url, self.model_id, timeout_s=self.timeout_s)
        return BedrockTransport(self.model_id, self.region)

    @property
    def endpoint(self) -> str:
        """Where the session's events go (for the data-boundary ledger)."""
        if self.base_url:
            return f"{self.base_url.rstrip('/')}/model/{self.model_id}/invoke-with-bidirectional-stream"
        region = self.region or os.environ.get("AWS_REGION") or "us-east-1"
        return f"https://bedrock-runtime.{region}.amazonaws.com/model/{self.model_id}/invoke-with-bidirectional-stream"

    def setup_events(self, prompt: str, audio: str, instructions: str, tools: tuple[ToolSchema, ...], *,
                     max_tokens: int, temperature: float) -> list[dict[str, Any]]:
        """The events that open a session, in order (exposed for tests)."""
        return [ev.session_start(max_tokens=max_tokens, temperature=temperature, endpointing=self.endpointing),
                ev.prompt_start(prompt, voice=self.voice, output_rate=self.output_rate, tools=tools),
                *ev.text_block(prompt, "SYSTEM", instructions),
                ev.audio_start(prompt, audio, self.input_rate)]

    async def open(self, instructions: str, tools: tuple[ToolSchema, ...] = (), *, max_tokens: int = 1024,
                   temperature: float = 0.7) -> "NovaSonicStream":
        """Open one session with the agent's instructions and tools.

        Raises:
            PortError: the transport failed. MissingExtra / ConfigError: see the transports.
        """
        t = self.transport()
        await t.open()
        stream = NovaSonicStream(t, self.input_rate)
        try:
            for e in self.setup_events(stream.prompt, stream.audio, instructions, tools,
                                       max_tokens=max_tokens, temperature=temperature):
                await t.send(e)
        except BaseException:
            await t.aclose()
            raise
        stream.start()
        return stream


class NovaSonicStream:
    """One open session: :meth:`send_audio` (non-blocking, from the audio path), :meth:`events`,
    :meth:`send_tool_result`, :meth:`close`. Events are sent in order by one sender task."""

    def __init__(self, transport: Transport, input_rate: int) -> None:
        self.t = transport
        self.prompt, self.audio = uuid.uuid4().hex, uuid.uuid4().hex
        self.input_rate = input_rate
        self._q: asyncio.Queue = asyncio.Queue()
        self._sender: asyncio.Task | None = None
        self.error: BaseException | None = None
        self.parser = ev.OutputParser()

    def start(self) -> None:
        self._sender = asyncio.get_running_loop().create_task(self._send_loop())

    async def _send_loop(self) -> None:
        while (e := await self._q.get()) is not None:
            try:
                await self.t.send(e)
            except PortError as exc:
                self.error = exc
                return

    def send_audio(self, pcm: np.ndarray) -> None:
        """Queue one piece of caller audio (int16 mono at the input rate)."""
        self._q.put_nowait(ev.audio_input(self.prompt, self.audio, pcm))

    def send_tool_result(self, tool_use_id: str, result_text: str) -> None:
        for e in ev.tool_result(self.prompt, tool_use_id, result_text):
            self._q.put_nowait(e)

    def send_text(self, text: str) -> None:
        """A typed (interactive) user turn — Nova 2's cross-modal text input."""
        for e in ev.text_block(self.prompt, "USER", text, interactive=True):
            self._q.put_nowait(e)

    async def events(self) -> AsyncIterator[ev.OutputEvent]:
        """The model's events, parsed, until the session ends.

        Raises:
            PortError: a transport failure, a malformed event or an exception event.
        """
        async for raw in self.t.receive():
            yield self.parser.parse(raw)

    async def close(self) -> None:
        """End the session politely (``contentEnd`` of the audio, ``promptEnd``, ``sessionEnd``)."""
        for e in (ev.content_end(self.prompt, self.audio), ev.prompt_end(self.prompt), ev.session_end()):
            self._q.put_nowait(e)
        self._q.put_nowait(None)
        if self._sender is not None:
            try:
                await asyncio.wait_for(self._sender, 5.0)
            except (TimeoutError, asyncio.CancelledError):
                self._sender.cancel()
        await self.t.aclose()
