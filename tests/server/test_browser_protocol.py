"""The /ws protocol end to end over real sockets with fake models: client-side playback stamps
replace the server's estimates, and barge-in pauses then clears the client's playback."""

from __future__ import annotations

import numpy as np

from helpers import BrowserLikeClient, FakeProvider, health, read_timeline, silence, start_server, tone


def _boundaries(lines, name):
    return [x for x in lines if x.get("type") == "Boundary" and x["name"] == name]


async def test_call_gets_client_playback_stamps_and_a_waterfall(tmp_path):
    srv = start_server(FakeProvider(), tmp_path)
    try:
        client = BrowserLikeClient(f"ws://{srv.base}/ws")
        await client.call(np.concatenate([silence(300), tone(800)]), tail_ms=3500)
        assert client.close_code == 1000
        assert health(srv)["calls"] == 0
    finally:
        srv.__exit__()
    lines, meta = read_timeline(tmp_path)
    [turn] = meta["turns"]
    assert turn["v2v_ms"] is not None and turn["status"] == "completed"
    assert "playback_start" not in turn["estimated"] and "playback_end" not in turn["estimated"]
    observed = [b for b in _boundaries(lines, "playback_start") if not b["estimated"]]
    assert observed and observed[0]["data"]["source"] == "client"
    estimate = [b for b in _boundaries(lines, "playback_start") if b["estimated"]][0]
    # the client plays after its 60 ms jitter buffer: later than the server's estimate
    assert observed[0]["t_ms"] - estimate["t_ms"] >= 40
    assert abs(turn["boundaries"]["playback_start"] - observed[0]["t_ms"]) < 0.01
    assert sum(turn["segments"].values()) == turn["v2v_ms"] or \
        abs(sum(turn["segments"].values()) - turn["v2v_ms"]) < 1
    # the page got a live transcript and a waterfall for the turn
    assert any(m["final"] for m in client.of_type("transcript"))
    assert any(m["turn_id"] == 1 and m.get("v2v_ms") for m in client.of_type("turn"))
    assert client.of_type("agent")[0]["text"].startswith("Order 4217 has shipped")
    assert meta["clock_sync"]["rtt_ms"] < 50
    assert (tmp_path / next(p.name for p in tmp_path.iterdir()) / "caller.wav").exists()


async def test_barge_in_pauses_then_clears_client_playback(tmp_path):
    words = [f" word{i}" for i in range(40)] + ["."]
    srv = start_server(FakeProvider(texts=["Check order 4217.", "Stop."], tokens=words), tmp_path)
    try:
        client = BrowserLikeClient(f"ws://{srv.base}/ws")
        audio = np.concatenate([silence(300), tone(800), silence(1700), tone(700)])
        await client.call(audio, tail_ms=2500)
    finally:
        srv.__exit__()
    kinds = [m["type"] for m in client.messages]
    assert "pause" in kinds and "clear" in kinds
    assert kinds.index("pause") < kinds.index("clear")
    clear = client.of_type("clear")[0]
    assert clear["turn_id"] == 1
    lines, meta = read_timeline(tmp_path)
    first = meta["turns"][0]
    assert first["status"] == "interrupted"
    cut = [b for b in _boundaries(lines, "interrupted_at") if not b["estimated"]]
    assert cut and cut[0]["data"]["source"] == "client"
    agent = client.of_type("agent")[0]
    assert agent["interrupted"] and 0 < len(agent["text"].split()) < 44
    assert meta["turns"][1]["v2v_ms"] is not None


async def test_live_calls_are_recorded_in_the_harness_run_store(tmp_path):
    from rejoinder.harness.store import open_store
    from helpers import TOKEN, ServerThread
    from rejoinder.server.app import ServerConfig, create_app
    db = tmp_path / "runs.sqlite"
    cfg = ServerConfig(token=TOKEN, store_dir=tmp_path / "calls", run_store=db, record_runs=True)
    with ServerThread(create_app(cfg, FakeProvider())) as srv:
        client = BrowserLikeClient(f"ws://{srv.base}/ws")
        await client.call(np.concatenate([silence(300), tone(800)]), tail_ms=3500)
    with open_store(db) as store:
        [run] = store.runs()
        assert run["suite"] == "live" and run["status"] == "finished"
        [call] = store.calls(run["id"])
        assert call["scenario"] == "live-browser" and call["success"]
        [turn] = store.turns(run["id"])
        assert turn["v2v_ms"] is not None
        assert "playback_start" not in turn["estimated"]
