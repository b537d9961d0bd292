"""The Cartesia Ink adapter against our Ink-protocol server (Whisper base), real sockets."""

from __future__ import annotations

import asyncio
import json
import socket

import numpy as np
import pytest

from rejoinder.adapters.cartesia_stt import CartesiaSTT
from rejoinder.hosting import local
from rejoinder.hosting.wire import ServerFaults
from rejoinder.ports import PortError

from loopback import served


async def _one(x):
    yield x


async def _drain(stt, x):
    return [t async for t in stt.stream(_one(x))]


async def test_transcribes_real_speech_and_reuses_a_warm_pool(whisper_stt, asterisk, norm):
    x, ref = asterisk("conf-getpin")
    async with local.cartesia_stt(whisper_stt) as (server, url):
        stt = CartesiaSTT(url, "local-key", pool=1)
        await stt.connect()
        assert len(stt._idle) == 1
        await _twice(stt, server, x, norm(ref), norm)



async def _twice(stt, server, x, want: str, norm) -> None:
    """Two utterances through ``stt`` are each one final transcript reading ``want`` (after
    ``norm``); then close."""
    for _ in range(2):
        out = await _drain(stt, x)
        assert [t.final for t in out] == [True]
        assert norm(out[-1].text) == want
    assert server.utterances == 2
    await stt.aclose()

async def test_refused_and_auth_failures():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(PortError, match="cannot connect"):
        await _drain(CartesiaSTT(f"ws://127.0.0.1:{port}", "k"), np.zeros(1600, np.float32))


async def test_auth_failure_names_the_variable(whisper_stt):
    async with local.cartesia_stt(whisper_stt, api_key="right") as (_, url):
        with pytest.raises(PortError, match="authentication failed.*CARTESIA_API_KEY"):
            await _drain(CartesiaSTT(url, "wrong", pool=0), np.zeros(1600, np.float32))


@pytest.mark.parametrize("spec, match", [("stt:error", "Cartesia STT error: 500 injected_fault"),
                                         ("stt:drop", "closed before 'done'"),
                                         ("stt:garbage", "malformed frame")])
async def test_mid_stream_failures_are_port_errors(whisper_stt, asterisk, spec, match):
    x, _ = asterisk("hello")
    async with local.cartesia_stt(whisper_stt, faults=ServerFaults.parse(spec, "stt")) as (server, url):
        stt = CartesiaSTT(url, "local-key", pool=0)
        with pytest.raises(PortError, match=match):
            await _drain(stt, x)
        server.faults = ServerFaults()
        assert (await _drain(stt, x))[-1].text  # the next utterance on a new socket is served
        await stt.aclose()


async def test_stall_then_closing_the_stream(whisper_stt, asterisk):
    x, _ = asterisk("hello")
    async with local.cartesia_stt(whisper_stt, faults=ServerFaults.parse("stt:stall=4000", "stt")) as (server, url):
        stt = CartesiaSTT(url, "local-key", pool=0)
        stream = stt.stream(_one(x))
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(stream.__anext__(), 0.5)
        await stream.aclose()  # closes the socket: the server drops the utterance
        server.faults = ServerFaults()
        assert (await _drain(stt, x))[-1].text


async def test_stale_pooled_socket_is_replaced(whisper_stt, asterisk):
    x, _ = asterisk("hello")
    async with local.cartesia_stt(whisper_stt, idle_s=0.2) as (_, url):
        stt = CartesiaSTT(url, "local-key", pool=1)
        await stt.connect()
        await asyncio.sleep(0.6)  # the server closed the idle socket meanwhile
        assert (await _drain(stt, x))[-1].text
        await stt.aclose()


async def test_server_rejects_bad_query_and_survives_bad_commands(whisper_stt):
    from websockets.asyncio.client import connect
    from websockets.exceptions import InvalidStatus

    async with local.cartesia_stt(whisper_stt) as (_, url):
        hdr = {"X-API-Key": "local-key"}
        with pytest.raises(InvalidStatus) as err:
            await connect(f"{url}/stt/websocket?model=ink-whisper&encoding=pcm_s16le&sample_rate=abc",
                          additional_headers=hdr)
        assert err.value.response.status_code == 400 and b"sample_rate" in err.value.response.body
        async with connect(f"{url}/stt/websocket?model=ink-whisper&encoding=pcm_s16le&sample_rate=16000",
                           additional_headers=hdr) as ws:
            await ws.send("transcribe please")
            assert json.loads(await ws.recv())["error_code"] == "invalid_command"
            await ws.send(b"\x00\x01\x02")  # an odd number of bytes
            assert json.loads(await ws.recv())["error_code"] == "invalid_audio"
            await ws.send(b"\x00\x00" * 1600)
            await ws.send("finalize")
            msgs = [json.loads(await ws.recv())]
            while msgs[-1]["type"] != "flush_done":
                msgs.append(json.loads(await ws.recv()))
            await ws.send("done")  # the older name of close
            assert json.loads(await ws.recv())["type"] == "done"


async def test_the_asgi_face_speaks_the_same_protocol(whisper_stt, asterisk, norm):
    """The server's ASGI app (what Ray Serve hosts: ``serve --ray --models stt``) under uvicorn:
    the real adapter transcribes real speech through it, a wrong key and a bad query are refused
    before the upgrade, an injected drop ends the socket before ``done``."""
    from websockets.asyncio.client import connect
    from websockets.exceptions import InvalidStatus

    from rejoinder.hosting.cartesia_stt_server import CartesiaSTTServer, create_app

    x, ref = asterisk("conf-getpin")
    server = CartesiaSTTServer(whisper_stt, api_key="asgi-key")
    async with served(create_app(server)) as port:
        url = f"ws://127.0.0.1:{port}"
        stt = CartesiaSTT(url, "asgi-key", pool=1)
        await _twice(stt, server, x, norm(ref), norm)
        with pytest.raises(PortError, match="authentication failed.*CARTESIA_API_KEY"):
            await _drain(CartesiaSTT(url, "wrong", pool=0), x)
        with pytest.raises(InvalidStatus) as err:
            await connect(f"{url}/stt/websocket?model=ink-whisper&encoding=pcm_s16le&sample_rate=abc",
                          additional_headers={"X-API-Key": "asgi-key"})
        assert err.value.response.status_code == 400 and b"sample_rate" in err.value.response.body
        server.faults = ServerFaults.parse("stt:drop", "stt")
        with pytest.raises(PortError, match="closed before 'done'"):
            await _drain(CartesiaSTT(url, "asgi-key", pool=0), x)
