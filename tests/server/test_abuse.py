"""Abuse: no token, a wrong token, oversized messages, garbage, a wrong sample rate, floods,
the call cap, and 50 abrupt disconnects — each gets a clear close code while a good call goes
on, and afterwards no call, task or slot is left behind."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import struct

import numpy as np
import pytest
import websockets

from helpers import TOKEN, BrowserLikeClient, FakeProvider, health, silence, start_server, tone


async def _refused(url: str, *messages, expect_error: bool = True) -> tuple[int, str, list[dict]]:
    """Send ``messages`` and read until the server closes; (code, reason, JSON messages)."""
    got: list[dict] = []
    async with websockets.connect(url, max_size=1 << 24) as ws:
        try:
            for m in messages:
                await ws.send(m)
        except websockets.ConnectionClosed:
            pass
        try:
            async for m in ws:
                if isinstance(m, str):
                    msg = json.loads(m)
                    got.append(msg)
                    if msg["type"] == "ping":
                        # the server may already be closing: a pong that cannot go out must not
                        # end the read before the messages already received (the error among them)
                        with contextlib.suppress(websockets.ConnectionClosed):
                            await ws.send(json.dumps({"type": "pong", "id": msg["id"], "t": 0.0}))
        except websockets.ConnectionClosed:
            pass
        await asyncio.wait_for(ws.wait_closed(), 10)
        code, reason = ws.close_code, ws.close_reason
    if expect_error:
        assert [m for m in got if m["type"] == "error"], f"no error message before close {code}"
    return code, reason, got


def hello(**kw) -> str:
    return json.dumps({"type": "hello", "token": TOKEN, "sample_rate": 16000, **kw})


def frame(n: int = 320, t: float = float("nan")) -> bytes:
    return struct.pack("<d", t) + np.zeros(n, dtype="<i2").tobytes()


@pytest.fixture
def server(tmp_path):
    srv = start_server(FakeProvider(), None, max_calls=8)
    yield srv
    srv.__exit__()


async def _settle(srv, baseline: int) -> dict:
    for _ in range(100):
        h = health(srv)
        if h["calls"] == 0 and h["tasks"] <= baseline:
            return h
        await asyncio.sleep(0.1)
    return health(srv)


async def test_abuse_gets_clear_close_codes_while_a_good_call_goes_on(server):
    url = f"ws://{server.base}/ws"
    baseline = health(server)["tasks"]
    good = BrowserLikeClient(url)
    good_call = asyncio.create_task(good.call(np.concatenate([silence(300), tone(800)]), tail_ms=6000))

    cases = {
        "no token": ([json.dumps({"type": "hello", "sample_rate": 16000})], 4401, "missing token"),
        "wrong token": ([hello(token="x" * 20)], 4401, "wrong token"),
        "token in query": ([hello()], 4401, "wrong token"),  # a wrong query token wins
        "wrong sample rate": ([hello(sample_rate=12345)], 4400, "sample_rate"),
        "sample rate not a number": ([hello(sample_rate="fast")], 4400, "sample_rate"),
        "garbage first": (["}{ not json"], 1007, "not JSON"),
        "binary first": ([os.urandom(700)], 4400, "hello"),
        "oversized text": ([hello(client="x" * 20000)], 1009, "limit"),
        "oversized binary": ([hello(), frame(40000)], 1009, "limit"),
        "garbage JSON in call": ([hello(), "[1, 2, 3]"], 4400, "type"),
        "unknown type": ([hello(), json.dumps({"type": "launch"})], 4400, "launch"),
        "odd-length frame": ([hello(), frame() + b"\x01"], 1007, "even"),
        "short frame": ([hello(), b"\x00\x01"], 1007, "audio frame"),
        "infinite stamp": ([hello(), frame(t=float("inf"))], 1007, "infinite"),
        "hello twice": ([hello(), hello()], 4400, "twice"),
        "flood": ([hello()] + [json.dumps({"type": "stats", "stats": {}})] * 600, 1008, "rate"),
    }
    for name, (msgs, code, words) in cases.items():
        target = url + ("?token=nope" if name == "token in query" else "")
        # a flooding client may still be sending when the close comes: it may miss the JSON error
        got_code, reason, _ = await _refused(target, *msgs, expect_error=name != "flood")
        assert got_code == code, f"{name}: {got_code} {reason}"
        assert words in reason, f"{name}: {reason!r}"

    # a message beyond the transport's own limit (1 MiB) is refused by the socket layer: 1009
    got_code, _, _ = await _refused(url, hello(), frame(600_000), expect_error=False)
    assert got_code == 1009

    # 50 abrupt disconnects at every stage of a call: before hello, after hello, mid-audio
    async def abort(k: int) -> None:
        ws = await websockets.connect(url)
        if k % 3:
            await ws.send(hello())
        if k % 3 == 2:
            try:
                for _ in range(3):
                    msg = json.loads(await asyncio.wait_for(ws.recv(), 2))
                    if msg["type"] == "ping":
                        await ws.send(json.dumps({"type": "pong", "id": msg["id"], "t": 1.0}))
                for _ in range(10):
                    await ws.send(frame())
            except (asyncio.TimeoutError, websockets.ConnectionClosed):
                pass
        ws.transport.abort()

    for batch in range(10):
        await asyncio.gather(*(abort(batch * 5 + k) for k in range(5)))

    await asyncio.wait_for(good_call, 30)
    assert good.close_code == 1000
    turns = good.of_type("turn")
    assert turns and turns[-1]["v2v_ms"] is not None
    assert "playback_start" not in turns[-1]["estimated"]
    after = await _settle(server, baseline)
    assert after["calls"] == 0, after
    assert after["tasks"] <= baseline, after


async def test_calls_beyond_the_cap_are_refused_with_1013(tmp_path):
    srv = start_server(FakeProvider(), None, max_calls=1)
    try:
        url = f"ws://{srv.base}/ws"
        first = BrowserLikeClient(url)
        call = asyncio.create_task(first.call(silence(1500), tail_ms=0))
        await asyncio.wait_for(first.ready.wait(), 5)
        code, reason, got = await _refused(url, hello())
        assert code == 1013 and "busy" in reason
        assert got[-1]["code"] == "busy"
        await asyncio.wait_for(call, 10)
        assert first.close_code == 1000
        # the slot is free again
        again = BrowserLikeClient(url)
        await again.call(silence(200), tail_ms=0)
        assert again.close_code == 1000
    finally:
        srv.__exit__()


async def test_no_hello_times_out(server, monkeypatch):
    import rejoinder.server.browser as browser
    monkeypatch.setattr(browser, "HELLO_TIMEOUT_S", 0.3)
    code, reason, got = await _refused(f"ws://{server.base}/ws")
    assert code == 4408 and "hello" in reason


def test_token_is_generated_once_and_kept_private(tmp_path, monkeypatch):
    from rejoinder.server.guard import TOKEN_ENV, resolve_token
    monkeypatch.delenv(TOKEN_ENV, raising=False)
    path = tmp_path / "cfg" / "server-token"
    token, source = resolve_token(None, path)
    assert source == "generated" and len(token) >= 24
    assert path.stat().st_mode & 0o077 == 0
    assert resolve_token(None, path) == (token, str(path))
    monkeypatch.setenv(TOKEN_ENV, "from-the-environment")
    assert resolve_token(None, path)[0] == "from-the-environment"
    assert resolve_token("from-the-flag", path)[0] == "from-the-flag"
