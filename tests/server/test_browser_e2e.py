"""A whole call from Debian's headless Chromium, whose fake microphone plays real speech (Asterisk
prompts), to the real embedded stack over real sockets on 127.0.0.1: the agent answers, the page
shows a waterfall per turn, and every answered turn has a client-side ``playback_start``."""

from __future__ import annotations

import asyncio
import json
import statistics
import time

import pytest

from chromium import COUNT_COLOURS_JS, Chromium, chromium_available, png_size
from helpers import CALLER_END_MS, TOKEN, ServerThread, health, speech_wav


@pytest.fixture(autouse=True)
def _needs_chromium():
    assert chromium_available(), "Debian chromium is not installed: run scripts/setup.sh"

COLOURS = {"endpointing": (0x7a, 0x5c, 0xb8), "transcription": (0x3b, 0x6f, 0xb6),
           "tts_ttfb": (0x2f, 0x8f, 0x5b), "playout": (0x1f, 0x8f, 0xa8)}


def _real_provider():
    from rejoinder.runtime import Runtime
    from rejoinder.server.app import AgentProvider
    return AgentProvider(Runtime())


def truth_aligned_v2v(call_dir, truth, turns) -> list[float]:
    """V2V per answered turn from the caller audio's own end of speech (like `rejoinder call`):
    the server's caller.wav locates the WAV's first voiced sample on the call clock."""
    import soundfile as sf
    from rejoinder.harness.caller import voiced_span
    meta = json.loads((call_dir / "call.json").read_text())
    assert not meta.get("observer_errors"), meta["observer_errors"]  # no observer was dropped
    pcm, _ = sf.read(str(call_dir / "caller.wav"), dtype="int16")
    first, _ = voiced_span(pcm)
    offset = meta["caller_origin_ms"] + first / 16 - truth[0][0]
    out = []
    for t in turns:
        start = t["boundaries"].get("playback_start")
        ends = [offset + e for _, e in truth if offset + e <= t["boundaries"].get("eot_decided", -1)]
        if start is not None and ends:
            out.append(round(start - ends[-1], 1))
    return out


async def test_browser_call_real_stack(tmp_path):
    from rejoinder.server.app import ServerConfig, create_app
    wav = tmp_path / "caller.wav"
    truth = speech_wav(wav)
    store = tmp_path / "store"
    app = create_app(ServerConfig(token=TOKEN, store_dir=store), _real_provider())
    with ServerThread(app) as srv:
        deadline = time.monotonic() + 600  # loading all models takes minutes on a loaded box
        while health(srv)["models"] == "loading" and time.monotonic() < deadline:
            await asyncio.sleep(0.2)
        assert health(srv)["models"] == "ready", "the embedded models did not load"
        async with Chromium(f"http://{srv.base}/?autostart=1#token={TOKEN}", wav) as br:
            t0 = time.monotonic()
            while not (await br.js("window.rejoinder && window.rejoinder.callId")):
                assert time.monotonic() - t0 < 20, br.console
                await asyncio.sleep(0.1)
            await asyncio.sleep(CALLER_END_MS / 1000 - (time.monotonic() - t0) + 1.0)
            page = await br.js("JSON.stringify(window.rejoinder)")
            await br.js("document.getElementById('hangup').click()")
            for _ in range(50):
                if await br.js("window.rejoinder.closed && window.rejoinder.closed.code"):
                    break
                await asyncio.sleep(0.1)
            shot = await br.screenshot(tmp_path / "call.png")
            counts = await br.js(f"({COUNT_COLOURS_JS})({json.dumps(__import__('base64').b64encode(shot).decode())}, "
                                 f"{json.dumps(COLOURS)})")
            closed = await br.js("window.rejoinder.closed")
            assert not [c for c in br.console if c.startswith("EXCEPTION")], br.console
        assert health(srv)["calls"] == 0
    page = json.loads(page)
    assert closed["code"] == 1000
    assert page["errors"] == [], page["errors"]
    [call_dir] = list(store.iterdir())
    meta = json.loads((call_dir / "call.json").read_text())
    lines = [json.loads(x) for x in (call_dir / "timeline.jsonl").read_text().splitlines()]
    answered = [t for t in meta["turns"] if t["heard_text"]]
    assert len(answered) >= 2, meta["turns"]
    for t in answered:
        ps = [x for x in lines if x.get("type") == "Boundary" and x["name"] == "playback_start"
              and x["turn_id"] == t["turn_id"] and not x["estimated"]]
        assert ps and ps[0]["data"]["source"] == "client", t["turn_id"]
        assert "playback_start" not in t["estimated"]
        assert t["v2v_ms"] is not None and 0 < t["v2v_ms"] < 5000
    # the page showed the live transcript and one waterfall per answered turn
    assert any(line.startswith("Caller:") for line in page["lines"])
    assert any(line.startswith("Agent:") for line in page["lines"])
    assert {int(k) for k in page["turns"]} >= {t["turn_id"] for t in answered}
    # the screenshot is a real page with the waterfall bars drawn
    assert png_size(shot) == (1280, 900) or png_size(shot)[0] >= 800
    assert all(counts[k] > 50 for k in ("endpointing", "playout")), counts
    v2v = [t["v2v_ms"] for t in answered]
    aligned = truth_aligned_v2v(call_dir, truth, answered)
    report = {"v2v_ms": v2v, "v2v_p50": statistics.median(v2v), "truth_aligned_v2v_ms": aligned,
              "truth_aligned_p50": statistics.median(aligned) if aligned else None,
              "client": meta["client"], "clock_sync": meta.get("clock_sync"),
              "segments": [t["segments"] for t in answered]}
    (tmp_path / "report.json").write_text(json.dumps(report, indent=1))
    print("browser call:", json.dumps(report))
