"""The Cartesia Sonic adapter against our Cartesia-protocol server: real sockets, real engine."""

from __future__ import annotations

import asyncio
import json
import socket

import pytest

from rejoinder.adapters.cartesia_tts import CartesiaTTS
from rejoinder.errors import ConfigError
from rejoinder.hosting import local
from rejoinder.hosting.wire import ServerFaults
from rejoinder.ports import PortError

TEXT = "Your order is out for delivery. It will arrive on Thursday afternoon."


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def _drain(stream):
    return [p async for p in stream]


async def _until(cond, timeout=3.0):
    for _ in range(int(timeout / 0.02)):
        if cond():
            return True
        await asyncio.sleep(0.02)
    return cond()


async def test_refused_connection_is_a_port_error():
    tts = CartesiaTTS(f"ws://127.0.0.1:{_closed_port()}", "k")
    with pytest.raises(PortError, match="cannot connect"):
        await _drain(tts.stream(TEXT))


async def test_auth_failure_names_the_variable(espeak_tts, monkeypatch):
    async with local.cartesia_tts(espeak_tts, api_key="right") as (_, url):
        with pytest.raises(PortError, match="authentication failed.*CARTESIA_API_KEY"):
            await _drain(CartesiaTTS(url, "wrong").stream(TEXT))
    monkeypatch.delenv("CARTESIA_API_KEY", raising=False)
    with pytest.raises(ConfigError, match="set CARTESIA_API_KEY"):
        CartesiaTTS("ws://127.0.0.1:1")


async def test_mid_stream_error_after_first_audio(espeak_tts):
    async with local.cartesia_tts(espeak_tts, faults=ServerFaults.parse("tts:error@3", "tts")) as (server, url):
        tts = CartesiaTTS(url, "local-key")
        got = []
        with pytest.raises(PortError, match="injected_fault"):
            async for p in tts.stream(TEXT):
                got.append(p)
        assert len(got) == 3 and all(len(p.pcm) == 1600 for p in got)  # 100 ms pieces at 16 kHz
        server.faults = ServerFaults()  # the socket is still good: the next request is served on it
        assert [p async for p in tts.stream("Hello.")]
        await tts.aclose()


async def test_server_closing_while_speaking_is_a_port_error_then_reconnects(espeak_tts):
    faults = ServerFaults.parse("tts:drop@2%0.5", "tts", seed=3)
    async with local.cartesia_tts(espeak_tts, faults=faults) as (_, url):
        tts = CartesiaTTS(url, "local-key")
        outcomes = []
        for _ in range(6):
            got = []
            try:
                async for p in tts.stream(TEXT):
                    got.append(p)
                outcomes.append(("ok", len(got)))
            except PortError as exc:
                assert "dropped" in str(exc) or "closed" in str(exc)
                outcomes.append(("dropped", len(got)))
        assert ("dropped", 2) in outcomes and any(o[0] == "ok" for o in outcomes), outcomes
        assert faults.fired == sum(1 for o in outcomes if o[0] == "dropped")
        await tts.aclose()


async def test_stall_then_barge_in_cancels_the_context_on_the_server(espeak_tts):
    faults = ServerFaults.parse("tts:stall=4000@1", "tts")
    async with local.cartesia_tts(espeak_tts, faults=faults) as (server, url):
        tts = CartesiaTTS(url, "local-key")
        stream = tts.stream(TEXT)
        first = await stream.__anext__()
        assert len(first.pcm)
        with pytest.raises(TimeoutError):  # the server stalls: nothing more within 300 ms
            await asyncio.wait_for(stream.__anext__(), 0.3)
        await stream.aclose()
        assert await _until(lambda: server.cancelled == 1)  # the cancel reached the server
        server.faults = ServerFaults()
        assert [p async for p in tts.stream("Hello.")]  # and the socket serves the next request
        await tts.aclose()


async def test_malformed_frame_is_a_port_error(espeak_tts):
    async with local.cartesia_tts(espeak_tts, faults=ServerFaults.parse("tts:garbage@1", "tts")) as (server, url):
        tts = CartesiaTTS(url, "local-key")
        with pytest.raises(PortError, match="malformed"):
            await _drain(tts.stream(TEXT))
        server.faults = ServerFaults()
        assert [p async for p in tts.stream("Hello.")]  # a fresh socket replaces the bad one
        await tts.aclose()


async def test_continuation_streams_several_chunks_on_one_context(piper_tts):
    async with local.cartesia_tts(piper_tts) as (server, url):
        tts = CartesiaTTS(url, "local-key")

        async def chunks():
            yield "Your order is out for delivery. "
            yield "It will arrive on Thursday."

        pieces = [p async for p in tts.stream_many(chunks())]
        words = []
        offset = 0.0
        for p in pieces:
            words += [(w, offset + a, offset + b) for w, a, b in p.words]
            offset += 1000 * len(p.pcm) / tts.sample_rate
        assert [w for w, _, _ in words] == "Your order is out for delivery. It will arrive on Thursday.".split()
        assert all(a < b for _, a, b in words) and words[-1][2] <= offset + 1
        assert server.contexts_served == 1
        await tts.aclose()


async def test_server_survives_bad_clients(espeak_tts):
    from websockets.asyncio.client import connect

    async with local.cartesia_tts(espeak_tts) as (_, url):
        async with connect(f"{url}/tts/websocket", additional_headers={"X-API-Key": "local-key"}) as ws:
            for bad in ("{not json", "[1, 2]", json.dumps({"transcript": "hi", "context_id": "c"}),
                        json.dumps({"model_id": "m", "transcript": "hi", "voice": {}, "context_id": "c",
                                    "output_format": {"container": "raw", "encoding": "pcm_mulaw",
                                                      "sample_rate": 8000}})):
                await ws.send(bad)
                msg = json.loads(await ws.recv())
                assert msg["type"] == "error" and msg["message"], msg
            await ws.send(b"\x00\x01")
            assert json.loads(await ws.recv())["type"] == "error"
            ok = CartesiaTTS(url, "local-key").request("Hello.", "c2")
            await ws.send(json.dumps(ok))
            kinds = set()
            while "done" not in kinds:
                kinds.add(json.loads(await ws.recv())["type"])
            assert "chunk" in kinds


class _Blackhole:
    """A loopback TCP proxy that can stop forwarding on its open connections while keeping them
    open: to the client, a half-open socket (the peer gone without a close)."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.frozen: set[int] = set()
        self.accepted = 0
        self.server = None

    async def __aenter__(self):
        self.server = await asyncio.start_server(self._conn, "127.0.0.1", 0)
        return self.server.sockets[0].getsockname()[1]

    async def __aexit__(self, *exc):
        self.server.close()

    def freeze_all(self) -> None:
        self.frozen.update(range(self.accepted))

    async def _conn(self, reader, writer):
        n = self.accepted
        self.accepted += 1
        up_r, up_w = await asyncio.open_connection("127.0.0.1", self.port)

        async def pipe(src, dst):
            try:
                while data := await src.read(65536):
                    if n in self.frozen:
                        continue  # swallowed: nothing gets through, nothing is closed
                    dst.write(data)
                    await dst.drain()
            except (ConnectionError, asyncio.CancelledError):
                pass
        await asyncio.gather(pipe(reader, up_w), pipe(up_r, writer))


async def test_a_half_open_socket_is_detected_and_replaced_at_the_retry(espeak_tts):
    async with local.cartesia_tts(espeak_tts) as (_, url):
        port = int(url.rsplit(":", 1)[1])
        hole = _Blackhole(port)
        async with hole as proxy_port:
            tts = CartesiaTTS(f"ws://127.0.0.1:{proxy_port}", "local-key")
            assert await _drain(tts.stream("Hello there."))  # the socket is up and used
            hole.freeze_all()  # the path dies silently: no FIN, no RST
            with pytest.raises(TimeoutError):  # what the runtime's first-audio watchdog does
                await asyncio.wait_for(_drain(tts.stream("Are you there?")), 1.0)
            # the retry must not go to the dead socket again: pinged, found dead, replaced
            pieces = await asyncio.wait_for(_drain(tts.stream("Your order has shipped.")), 20.0)
            assert pieces and sum(len(p.pcm) for p in pieces) > 0
            assert tts.reconnects == 1 and hole.accepted == 2
            await tts.aclose()
