"""Bad targets get clear errors, and nothing half-written lands in the store: a run that cannot
start leaves no run row; a call that goes wrong is stored as failed with its reason."""

from __future__ import annotations

import asyncio
import json
import re

import numpy as np
import pytest

from rejoinder.harness.remote.target import RemoteTarget, parse_target
from rejoinder.harness.remote.links import TargetError

from remote_helpers import (NoTranscript, after_start, drain, free_port, media, open_ws_call, raw_server, tone_turns,
                            ws_server)


def target(port: int, path: str = "/twilio", **kw) -> RemoteTarget:
    return RemoteTarget(parse_target(f"ws://127.0.0.1:{port}{path}", connect_timeout_s=1.0, **kw),
                        transcriber=NoTranscript())


async def test_a_refused_connection_names_the_problem():
    with pytest.raises(TargetError, match="connection refused; is the target running"):
        await target(free_port()).probe()


async def test_a_target_that_never_answers_the_handshake():
    async with raw_server(None) as port:
        with pytest.raises(TargetError, match="accepted no WebSocket handshake within 1 s: the target never answered"):
            await target(port).probe()


@pytest.mark.parametrize("reply, why", [
    (b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n", "answered HTTP 404 instead of a WebSocket upgrade"),
    (b"\x00\xffgarbage garbage\r\n\r\n", "does not speak WebSocket"),
])
async def test_a_target_that_does_not_speak_websocket(reply, why):
    async with raw_server(reply) as port:
        with pytest.raises(TargetError, match=why):
            await target(port).probe()


def test_malformed_urls_are_refused_before_anything_runs():
    with pytest.raises(TargetError, match="not a WebSocket URL"):
        parse_target("http://127.0.0.1:1/twilio")
    with pytest.raises(TargetError, match="unknown protocol"):
        parse_target("ws://127.0.0.1:1/x", "sip")
    assert parse_target("ws://h:1/ws").protocol == "rejoinder"
    assert parse_target("ws://h:1/twilio?token=abc").token == "abc"
    assert parse_target("ws://h:1/twilio?token=abc&x=1").shown_url == "ws://h:1/twilio?x=1"


async def garbage_text(conn):
    await after_start(conn)
    await conn.send("this is not json {")
    await drain(conn)


async def garbage_binary(conn):
    await after_start(conn)
    await conn.send(b"\x01\x02\x03")
    await drain(conn)


async def garbage_base64(conn):
    await after_start(conn)
    await conn.send(json.dumps({"event": "media", "media": {"payload": "%%% not base64 %%%"}}))
    await drain(conn)


async def linear_pcm(conn):
    """Sends 16 kHz linear PCM where μ-law 8 kHz is due, paced in real time."""
    await after_start(conn)
    t = np.arange(320) / 16000
    frame = (3000 * np.sin(2 * np.pi * 300 * t)).astype("<i2").tobytes()
    for _ in range(100):
        await conn.send(media(frame))
        await asyncio.sleep(0.02)


async def hang_up(conn):
    await after_start(conn)
    await asyncio.sleep(0.8)
    await conn.close(1011, "agent crashed")


async def silent(conn):
    await drain(conn)


async def ws_wrong_rate_ready(conn):
    await open_ws_call(conn, line_rate=24000)
    await drain(conn)


async def ws_wrong_rate_frames(conn):
    await open_ws_call(conn)
    await asyncio.sleep(0.3)
    await conn.send(b"\x01\x00\x00\x00\x00\x00\x00\x00" + np.zeros(960, "<i2").tobytes())
    await drain(conn)


@pytest.mark.parametrize("behaviour, path, why", [
    (garbage_text, "/twilio", "garbage from the target: text frame is not JSON"),
    (garbage_binary, "/twilio", "garbage from the target: a binary message"),
    (garbage_base64, "/twilio", "a media payload that is not base64"),
    (linear_pcm, "/twilio", r"does not decode as μ-law|× real time for .* wrong sample rate\? Media Streams audio is μ-law"),
    (hang_up, "/twilio", r"hung up mid-call \(close code 1011: agent crashed\)"),
    (silent, "/twilio", "the target never answered: no audio in"),
    (ws_wrong_rate_ready, "/ws", "streams agent audio at 24000 Hz; the /ws protocol is 16000 Hz: wrong sample rate"),
    (ws_wrong_rate_frames, "/ws", "960 samples; /ws frames are 20 ms at 16000 Hz"),
])
async def test_a_call_that_goes_wrong_ends_with_its_reason(behaviour, path, why):
    async with ws_server(behaviour) as port:
        t = target(port, path)
        await t.probe()
        # the caller first waits up to 3 s for a greeting, then speaks: a silent target is told
        # apart only after that
        res = await t.call(tone_turns(1), tail_ms=200, max_ms=5000)
    assert res.error is not None
    assert re.search(why, res.error), res.error


def test_bench_against_a_refused_target_leaves_no_run_row(tmp_path):
    from typer.testing import CliRunner

    from rejoinder.cli import app
    from rejoinder.harness.store import open_store
    store = tmp_path / "runs.sqlite"
    res = CliRunner().invoke(app, ["bench", "--target", f"ws://127.0.0.1:{free_port()}/twilio", "--concurrency", "1",
                                   "--store", str(store)])
    assert res.exit_code == 2
    assert "connection refused" in res.output
    with open_store(store) as st:
        assert st.runs() == []


def test_bench_refuses_in_process_options_with_a_target(tmp_path):
    from typer.testing import CliRunner

    from rejoinder.cli import app
    res = CliRunner().invoke(app, ["bench", "--target", "ws://127.0.0.1:1/twilio", "--tts", "espeak",
                                   "--store", str(tmp_path / "r.sqlite")])
    assert res.exit_code == 2 and "--tts configure the in-process agent" in res.output


async def test_failed_calls_are_stored_as_failed_with_their_reason(tmp_path):
    from harness_fakes import tone_suite
    from rejoinder.harness.bench import BenchOptions, run_bench
    from rejoinder.harness.store import open_store
    from rejoinder.harness.suite import load_suite

    _, scs = load_suite(tone_suite(tmp_path / "suite", names=("alpha",)))
    async with ws_server(hang_up) as port:
        with open_store(tmp_path / "runs.sqlite") as st:
            run_id = st.begin_run({"target": {"url": "x"}}, suite="t")
            status = await run_bench(target(port), scs, st, run_id, BenchOptions(levels=[1, 2]))
            calls = st.calls(run_id)
            assert status == "finished" and st.run(run_id)["status"] == "finished"
            assert len(calls) == 3 and not any(c["success"] for c in calls)
            assert all("hung up mid-call (close code 1011: agent crashed)" in c["error"] for c in calls)
            assert st.search("crashed")
