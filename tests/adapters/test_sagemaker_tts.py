"""The SageMaker response-stream adapter against our SageMaker-shaped endpoint (real HTTP, real
event-stream frames decoded by botocore)."""

from __future__ import annotations

import asyncio
import socket

import httpx
import pytest

from rejoinder.adapters.sagemaker_tts import SageMakerTTS
from rejoinder.errors import ConfigError
from rejoinder.hosting import local
from rejoinder.hosting.wire import ServerFaults
from rejoinder.ports import PortError

TEXT = "Your order is out for delivery. It will arrive on Thursday afternoon."
AK, SK = "AKIDLOCAL", "local-secret"


@pytest.fixture(autouse=True)
def creds(monkeypatch):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", AK)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SK)
    monkeypatch.delenv("AWS_SESSION_TOKEN", raising=False)
    monkeypatch.delenv("AWS_PROFILE", raising=False)


def endpoint(tts, **kw):
    return local.sagemaker_tts(tts, access_key=AK, secret_key=SK, **kw)


async def _drain(stream):
    return [p async for p in stream]


async def test_refused_connection_is_a_port_error():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(PortError, match="ConnectError"):
        await _drain(SageMakerTTS("rejoinder-tts", base_url=f"http://127.0.0.1:{port}").stream(TEXT))


async def test_auth_failure_names_the_variables(espeak_tts, monkeypatch):
    async with endpoint(espeak_tts) as (_, url):
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "not-the-secret")
        with pytest.raises(PortError, match="HTTP 403 InvalidSignatureException.*AWS_ACCESS_KEY_ID"):
            await _drain(SageMakerTTS("rejoinder-tts", base_url=url).stream(TEXT))
        monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDOTHER")
        with pytest.raises(PortError, match="UnrecognizedClientException"):
            await _drain(SageMakerTTS("rejoinder-tts", base_url=url).stream(TEXT))
        async with httpx.AsyncClient() as client:  # no signature at all
            r = await client.post(f"{url}/endpoints/rejoinder-tts/invocations-response-stream", json={})
            assert r.status_code == 403 and r.headers["x-amzn-ErrorType"].startswith("MissingAuthentication")
    for var in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.delenv(var)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    with pytest.raises(ConfigError, match="AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY"):
        SageMakerTTS("rejoinder-tts", base_url="http://127.0.0.1:1")


async def test_up_front_errors(espeak_tts):
    async with endpoint(espeak_tts) as (_, url):
        with pytest.raises(PortError, match="HTTP 400 ValidationError.*Endpoint other"):
            await _drain(SageMakerTTS("other", base_url=url).stream(TEXT))
        tts = SageMakerTTS("rejoinder-tts", base_url=url, sample_rate=12345)
        with pytest.raises(PortError, match="HTTP 424 ModelError.*422"):
            await _drain(tts.stream(TEXT))


async def test_model_stream_error_after_first_audio(espeak_tts):
    async with endpoint(espeak_tts, faults=ServerFaults.parse("tts:error@4", "tts")) as (app, url):
        tts = SageMakerTTS("rejoinder-tts", base_url=url)
        got = []
        with pytest.raises(PortError, match="ModelStreamError mid-stream: injected"):
            async for p in tts.stream(TEXT):
                got.append(p)
        assert len(got) == 4 and all(len(p.pcm) == 320 for p in got)  # Sonic's 20 ms chunks
        await tts.aclose()


async def test_connection_dropped_while_speaking(espeak_tts):
    async with endpoint(espeak_tts, faults=ServerFaults.parse("tts:drop@5", "tts")) as (app, url):
        tts = SageMakerTTS("rejoinder-tts", base_url=url)
        got = []
        with pytest.raises(PortError, match="RemoteProtocolError|ReadError|ended before"):
            async for p in tts.stream(TEXT):
                got.append(p)
        assert len(got) == 5
        await tts.aclose()


async def test_malformed_frame_fails_its_crc(espeak_tts):
    async with endpoint(espeak_tts, faults=ServerFaults.parse("tts:garbage@2", "tts")) as (app, url):
        tts = SageMakerTTS("rejoinder-tts", base_url=url)
        with pytest.raises(PortError, match="malformed event-stream frame.*ChecksumMismatch"):
            await _drain(tts.stream(TEXT))
        await tts.aclose()


async def test_stall_then_closing_the_stream_stops_the_server(espeak_tts):
    async with endpoint(espeak_tts, faults=ServerFaults.parse("tts:stall=4000@1", "tts")) as (app, url):
        tts = SageMakerTTS("rejoinder-tts", base_url=url)
        stream = tts.stream(TEXT)
        assert len((await stream.__anext__()).pcm)
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(stream.__anext__(), 0.3)
        await stream.aclose()
        for _ in range(150):
            if app.state.active == 0:
                break
            await asyncio.sleep(0.02)
        assert app.state.active == 0  # the endpoint's generation ended with the client's stream
        await tts.aclose()


async def test_parts_split_across_payload_parts_are_reassembled(piper_tts):
    async with endpoint(piper_tts) as (app, url):
        tts = SageMakerTTS("rejoinder-tts", base_url=url)
        pieces = await _drain(tts.stream("Thank you for calling."))
        words, offset = [], 0.0
        for p in pieces:
            words += [(w, offset + a) for w, a, _ in p.words]
            offset += 1000 * len(p.pcm) / tts.sample_rate
        assert [w for w, _ in words] == ["Thank", "you", "for", "calling."]
        assert app.state.requests == 1
        await tts.aclose()
