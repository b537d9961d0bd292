"""A managed-endpoint TTS shaped like Amazon SageMaker's ``InvokeEndpointWithResponseStream``
in front of Cartesia's Sonic container, serving any local TTS port (Piper).

HTTP (shared PROTOCOLS.md §3, §1.5): ``POST /endpoints/{name}/invocations-response-stream`` with a
JSON body (``context_id``, ``transcript``, ``voice``, ``output_format``, ``language``,
``add_timestamps``; no ``model_id``, no ``continue``: one request is one generation). The request
is SigV4-signed (service ``sagemaker``); the server checks the signature with the access key it
was given (``AWS_ACCESS_KEY_ID`` / ``AWS_SECRET_ACCESS_KEY`` in its environment; none: no auth).

The response is an AWS event stream (:mod:`rejoinder.hosting.eventstream`): ``PayloadPart`` events
whose bytes are newline-delimited JSON (``chunk`` with ≤ ``chunk_ms`` of base64 audio as the
Sonic container sends, ``timestamps``, ``done``), each line split over parts of at most
``part_bytes`` — clients must reassemble, as with the real endpoint. A failure mid-stream is a
``ModelStreamError`` exception event. Up-front errors use SageMaker's statuses: 400
``ValidationError`` (unknown endpoint), 403 (missing or bad signature), 424 ``ModelError`` with
``OriginalStatusCode`` 422 (bad body).
"""

from __future__ import annotations

import asyncio
import base64
import json
from typing import Any

import soxr
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ..ports import TTSPort
from . import eventstream
from .cartesia_tts_server import OutputFormat
from .wire import ENCODINGS, SAMPLE_RATES, ServerFaults, due_fault, encode_pcm


class SonicRequest(BaseModel):
    """The Sonic container's request body (no ``model_id``, no ``continue``)."""

    model_config = ConfigDict(extra="ignore", populate_by_name=True)
    context_id: str = Field(min_length=1, max_length=256)
    transcript: str
    voice: Any = None
    output_format: OutputFormat = Field(default_factory=OutputFormat)
    language: str = "en"
    add_timestamps: bool = False
    continue_: bool = Field(False, alias="continue")


def verify_sigv4(method: str, url: str, headers: dict[str, str], body: bytes, access_key: str,
                 secret_key: str, region: str) -> str | None:
    """Check a request's SigV4 ``Authorization`` (service ``sagemaker``) with botocore's signer.
    Returns None when valid, else the AWS error type (``MissingAuthenticationTokenException``,
    ``UnrecognizedClientException`` or ``InvalidSignatureException``)."""
    from botocore.auth import SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    auth = headers.get("authorization", "")
    if not auth.startswith("AWS4-HMAC-SHA256 "):
        return "MissingAuthenticationTokenException"
    fields = dict(p.strip().split("=", 1) for p in auth[len("AWS4-HMAC-SHA256 "):].split(",") if "=" in p)
    cred = fields.get("Credential", "").split("/")
    if len(cred) != 5 or cred[0] != access_key:
        return "UnrecognizedClientException"
    signed = fields.get("SignedHeaders", "").split(";")
    req = AWSRequest(method=method, url=url, data=body,
                     headers={h: headers.get(h, "") for h in signed if h})
    req.context["timestamp"] = headers.get("x-amz-date", "")
    signer = SigV4Auth(Credentials(access_key, secret_key, headers.get("x-amz-security-token")),
                       "sagemaker", cred[2])
    canonical = signer.canonical_request(req)
    expected = signer.signature(signer.string_to_sign(req, canonical), req)
    import hmac
    return None if hmac.compare_digest(expected, fields.get("Signature", "")) else "InvalidSignatureException"


def create_app(tts: TTSPort, *, endpoint_name: str = "rejoinder-tts", access_key: str | None = None,
               secret_key: str | None = None, region: str = "us-east-1", chunk_ms: float = 20.0,
               part_bytes: int = 4096, faults: ServerFaults | None = None):
    """The FastAPI app of the endpoint (run it with uvicorn)."""
    app = FastAPI(title="rejoinder managed-endpoint TTS (SageMaker response stream)")
    faults = faults or ServerFaults()
    app.state.requests = 0
    app.state.active = 0  # generations under way (a closed client stream ends its generation)

    def aws_error(status: int, kind: str, message: str, **extra: Any) -> JSONResponse:
        return JSONResponse({"message": message, "Message": message, **extra}, status_code=status,
                            headers={"x-amzn-ErrorType": f"{kind}:http://internal.amazon.com/coral/"
                                                         "com.amazon.coral.service/"})

    @app.get("/ping")
    async def ping() -> dict[str, str]:
        return {"status": "ok"}

    @app.post("/endpoints/{name}/invocations-response-stream")
    async def invoke(name: str, request: Request):
        body = await request.body()
        if access_key and secret_key:
            problem = verify_sigv4("POST", str(request.url), {k.lower(): v for k, v in request.headers.items()},
                                   body, access_key, secret_key, region)
            if problem:
                text = {"MissingAuthenticationTokenException": "Missing Authentication Token",
                        "UnrecognizedClientException": "The security token included in the request is invalid.",
                        "InvalidSignatureException": "The request signature we calculated does not match "
                        "the signature you provided."}[problem]
                return aws_error(403, problem, text)
        if name != endpoint_name:
            return aws_error(400, "ValidationError", f"Endpoint {name} of account 000000000000 not found.")
        try:
            req = SonicRequest.model_validate_json(body)
            fmt = req.output_format
            if req.continue_:
                raise ValueError("continue: this endpoint makes one generation per request")
            if fmt.container != "raw" or fmt.encoding not in ENCODINGS or fmt.sample_rate not in SAMPLE_RATES:
                raise ValueError(f"output_format must be raw, {'/'.join(ENCODINGS)}, one of "
                                 f"{', '.join(map(str, SAMPLE_RATES))} Hz")
        except (ValidationError, ValueError) as exc:
            msg = str(exc).splitlines()[0][:300] if not isinstance(exc, ValidationError) else (
                f"{'.'.join(str(x) for x in exc.errors()[0]['loc'])}: {exc.errors()[0]['msg']}")
            return aws_error(424, "ModelError", "Received client error (422) from primary with message "
                             f"\"{msg}\".", OriginalStatusCode=422, OriginalMessage=msg)
        app.state.requests += 1
        return StreamingResponse(_generate(req), media_type="application/vnd.amazon.eventstream",
                                 headers={"X-Amzn-SageMaker-Content-Type": "application/jsonlines",
                                          "x-Amzn-Invoked-Production-Variant": "AllTraffic"})

    def parts(event: dict[str, Any]) -> list[bytes]:
        line = (json.dumps(event) + "\n").encode("utf-8")
        return [eventstream.payload_part(line[i:i + part_bytes]) for i in range(0, len(line), part_bytes)]

    async def _generate(req: SonicRequest):
        fmt, cid = req.output_format, req.context_id
        rate_in = tts.sample_rate
        resampler = None if rate_in == fmt.sample_rate else soxr.ResampleStream(
            rate_in, fmt.sample_rate, 1, dtype="int16")
        step = max(1, int(fmt.sample_rate * chunk_ms / 1000))
        active = faults.draw()
        sent, offset_s = 0, 0.0
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        stream = tts.stream(req.transcript)
        app.state.active += 1
        try:
            async for piece in stream:
                if req.add_timestamps and piece.words:
                    ws = [(w, offset_s + a / 1000.0, offset_s + b / 1000.0) for w, a, b in piece.words]
                    for p in parts({"type": "timestamps", "context_id": cid, "status_code": 206, "done": False,
                                    "word_timestamps": {"words": [w for w, _, _ in ws],
                                                        "start": [round(a, 4) for _, a, _ in ws],
                                                        "end": [round(b, 4) for _, _, b in ws]}}):
                        yield p
                offset_s += len(piece.pcm) / rate_in
                pcm = piece.pcm if resampler is None else resampler.resample_chunk(piece.pcm)
                for i in range(0, len(pcm), step):
                    kind = await due_fault(active, sent)
                    if kind == "error":
                        yield eventstream.model_stream_error("injected mid-stream failure", "StreamBroken")
                        return
                    if kind == "drop":
                        raise ConnectionAbortedError("injected: connection dropped mid-stream")
                    if kind == "garbage":
                        bad = bytearray(eventstream.payload_part(b"{}\n"))
                        bad[-1] ^= 0xFF  # a wrong message CRC
                        yield bytes(bad)
                        return
                    data = base64.b64encode(encode_pcm(pcm[i:i + step], fmt.encoding)).decode("ascii")
                    for p in parts({"type": "chunk", "context_id": cid, "status_code": 206, "done": False,
                                    "data": data, "sampling_rate": fmt.sample_rate,
                                    "step_time": round(1000.0 * (loop.time() - t0), 1)}):
                        yield p
                    sent += 1
            for p in parts({"type": "done", "context_id": cid, "status_code": 206, "done": True}):
                yield p
        except ConnectionAbortedError:
            raise
        except Exception as exc:  # noqa: BLE001 — the engine failed after the headers went out
            yield eventstream.model_stream_error(f"model failed: {exc}"[:500], "StreamBroken")
        finally:
            app.state.active -= 1
            await stream.aclose()  # type: ignore[attr-defined]

    return app
