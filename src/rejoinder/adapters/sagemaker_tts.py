"""Sonic TTS behind a managed endpoint: Amazon SageMaker ``InvokeEndpointWithResponseStream``.

Each ``stream(text)`` is one signed HTTP request (SigV4, service ``sagemaker``; credentials from
botocore's chain: ``AWS_ACCESS_KEY_ID`` / ``AWS_SECRET_ACCESS_KEY`` / ``AWS_SESSION_TOKEN``,
``AWS_PROFILE``, …) and one generation: the endpoint has no continuation, so every text chunk is a
new stream. The response body is an AWS event stream decoded with botocore's
``EventStreamBuffer``; ``PayloadPart`` bytes are newline-delimited JSON events (Sonic's ``chunk``,
``timestamps``, ``done``, ``error``) split arbitrarily across parts, so they are buffered and
split on ``\\n`` (PROTOCOLS.md, gotcha 3). Barge-in closes the HTTP stream.

Errors are :class:`~rejoinder.ports.PortError`: a refused connection, HTTP 403 (names the AWS
variables to set), any other HTTP error (``ModelError`` with its original status), a
``ModelStreamError`` / ``InternalStreamFailure`` event, a frame that fails its CRC, or a stream
that ends before ``done`` — after first audio too, so the reply resumes from the last word heard.
"""

from __future__ import annotations

import json
import os
import uuid
from typing import Any, AsyncIterator


from ..errors import ConfigError
from ..ports import PortError, TTSAudio
from ._cartesia import WordTimeline, decode_chunk

CRED_HINT = "set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (and AWS_SESSION_TOKEN for temporary " \
            "credentials) or AWS_PROFILE"


class SageMakerTTS:
    """Streaming TTS from a SageMaker real-time endpoint hosting Cartesia Sonic.

    Args:
        endpoint_name: the endpoint (default ``$REJOINDER_SAGEMAKER_ENDPOINT``).
        region: default ``$AWS_REGION`` / ``$AWS_DEFAULT_REGION``, else ``us-east-1``.
        base_url: default ``https://runtime.sagemaker.{region}.amazonaws.com``
            (``$REJOINDER_SAGEMAKER_URL``); our server's ``http://host:port`` for local runs.
        aws_access_key_id, aws_secret_access_key: explicit credentials (default: botocore's chain).
        voice_id, sample_rate (Hz), language: the Sonic request's fields.
        timeout_s: connect/read timeout (s).

    Raises:
        ConfigError: no endpoint name, or no AWS credentials (names the variables to set).
    """

    def __init__(self, endpoint_name: str | None = None, region: str | None = None,
                 base_url: str | None = None, *, aws_access_key_id: str | None = None,
                 aws_secret_access_key: str | None = None, voice_id: str = "a0e99841-438c-4a64-b679-ae501e7d6091",
                 sample_rate: int = 16000, language: str = "en", timeout_s: float = 30.0) -> None:
        import botocore.session
        import httpx

        self.endpoint_name = endpoint_name or os.environ.get("REJOINDER_SAGEMAKER_ENDPOINT")
        if not self.endpoint_name:
            raise ConfigError("the SageMaker TTS needs an endpoint name: stack.sagemaker.endpoint_name "
                              "or REJOINDER_SAGEMAKER_ENDPOINT")
        self.region = region or os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1"
        base = base_url or os.environ.get("REJOINDER_SAGEMAKER_URL") or \
            f"https://runtime.sagemaker.{self.region}.amazonaws.com"
        self.url = f"{base.rstrip('/')}/endpoints/{self.endpoint_name}/invocations-response-stream"
        if aws_access_key_id and aws_secret_access_key:
            from botocore.credentials import Credentials
            creds = Credentials(aws_access_key_id, aws_secret_access_key)
        else:
            creds = botocore.session.Session().get_credentials()
        if creds is None:
            raise ConfigError(f"no AWS credentials for the SageMaker TTS: {CRED_HINT}")
        self._creds = creds
        self.sample_rate = int(sample_rate)
        self.voice_id = voice_id
        self.voice_name = f"sagemaker:{self.endpoint_name}"
        self.language = language
        self._timeout = httpx.Timeout(timeout_s)
        self._client: Any = None
        self._loop: Any = None

    def body(self, text: str, context_id: str) -> dict[str, Any]:
        """The JSON request body for ``text`` (exposed for inspection and tests)."""
        return {"context_id": context_id, "transcript": text, "language": self.language,
                "voice": {"mode": "id", "id": self.voice_id}, "add_timestamps": True,
                "output_format": {"container": "raw", "encoding": "pcm_s16le", "sample_rate": self.sample_rate}}

    def _signed_headers(self, body: bytes) -> dict[str, str]:
        from botocore.auth import SigV4Auth
        from botocore.awsrequest import AWSRequest

        req = AWSRequest(method="POST", url=self.url, data=body, headers={
            "Content-Type": "application/json", "X-Amzn-SageMaker-Accept": "application/jsonlines"})
        SigV4Auth(self._creds.get_frozen_credentials(), "sagemaker", self.region).add_auth(req)
        return dict(req.headers.items())

    def _http(self) -> Any:
        import asyncio

        import httpx

        loop = asyncio.get_running_loop()
        if self._client is None or self._loop is not loop:
            self._client, self._loop = httpx.AsyncClient(timeout=self._timeout), loop
        return self._client

    async def connect(self) -> None:
        """Nothing to open ahead: each utterance is a new HTTP stream (kept-alive connections are
        reused by the HTTP client)."""
        self._http()

    async def stream(self, text: str) -> AsyncIterator[TTSAudio]:
        """Synthesize one text chunk as one endpoint invocation; yields audio as parts arrive.

        Raises:
            PortError: see the module docstring.
        """
        import httpx
        from botocore.eventstream import EventStreamBuffer
        from botocore.eventstream import ParserError

        if not text.strip():
            return
        body = json.dumps(self.body(text, uuid.uuid4().hex)).encode("utf-8")
        frames = EventStreamBuffer()
        lines = bytearray()
        words = WordTimeline(self.sample_rate)
        try:
            async with self._http().stream("POST", self.url, content=body,
                                           headers=self._signed_headers(body)) as resp:
                if resp.status_code != 200:
                    raise self._http_error(resp.status_code, await resp.aread(), resp.headers)
                async for data in resp.aiter_bytes():
                    frames.add_data(data)
                    for message in frames:
                        for event in self._events(message, lines):
                            kind = event.get("type")
                            if kind == "chunk":
                                yield words.piece(decode_chunk(event, self.url))
                            elif kind == "timestamps":
                                words.add(event)
                            elif kind == "done" or event.get("done") is True and kind != "error":
                                rest = words.rest()
                                if rest is not None:
                                    yield rest
                                return
                            elif kind == "error":
                                raise PortError(f"{self.url}: the model reported an error: {str(event)[:300]}")
            raise PortError(f"{self.url}: the response stream ended before 'done'")
        except ParserError as exc:
            raise PortError(f"{self.url}: malformed event-stream frame ({type(exc).__name__}: {exc})") from None
        except httpx.HTTPError as exc:
            raise PortError(f"{self.url}: {type(exc).__name__}: {exc}") from None

    def _events(self, message: Any, lines: bytearray) -> list[dict[str, Any]]:
        headers = message.headers
        mtype = headers.get(":message-type")
        if mtype == "exception":
            try:
                detail = json.loads(message.payload.decode("utf-8")).get("Message", "")
            except (ValueError, UnicodeDecodeError, AttributeError):
                detail = message.payload[:200]
            raise PortError(f"{self.url}: {headers.get(':exception-type')} mid-stream: {detail}")
        if mtype == "error":
            raise PortError(f"{self.url}: {headers.get(':error-code')}: {headers.get(':error-message')}")
        if mtype != "event" or headers.get(":event-type") != "PayloadPart":
            return []
        lines.extend(message.payload)
        out: list[dict[str, Any]] = []
        while (nl := lines.find(b"\n")) >= 0:
            line = bytes(lines[:nl]).strip()
            del lines[:nl + 1]
            if not line:
                continue
            try:
                event = json.loads(line)
            except ValueError:
                raise PortError(f"{self.url}: malformed JSON event in the payload: {line[:80]!r}") from None
            if isinstance(event, dict):
                out.append(event)
        return out

    def _http_error(self, status: int, body: bytes, headers: Any) -> PortError:
        kind = (headers.get("x-amzn-ErrorType") or "").split(":")[0]
        text = body.decode("utf-8", "replace")[:300]
        if status == 403:
            return PortError(f"{self.url}: AWS rejected the credentials (HTTP 403 {kind}): {CRED_HINT}. {text}")
        return PortError(f"{self.url}: HTTP {status} {kind}: {text}")

    async def aclose(self) -> None:
        """Close the HTTP client."""
        if self._client is not None:
            await self._client.aclose()
            self._client = None

