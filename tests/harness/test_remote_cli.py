"""`rejoinder bench --target` and `rejoinder call --target` end to end against the loopback echo
target (both protocols), with the embedded Whisper; both runs land in the store and
`runs compare` puts them side by side."""

from __future__ import annotations

import asyncio
import json
import threading

import pytest
from typer.testing import CliRunner

from harness_fakes import tone_suite
from rejoinder.cli import app
from rejoinder.harness.remote.echo import serve_echo
from rejoinder.harness.store import open_store


@pytest.fixture(scope="module")
def echo_port():
    """The echo target in its own thread and event loop (the CLI runs its own)."""
    ready, stop = threading.Event(), threading.Event()
    box: dict = {}

    def run() -> None:
        async def main() -> None:
            async with serve_echo(delay_ms=500, hang_ms=300) as srv:
                box["port"] = srv.port
                ready.set()
                while not stop.is_set():
                    await asyncio.sleep(0.05)
        asyncio.run(main())

    th = threading.Thread(target=run, daemon=True)
    th.start()
    assert ready.wait(10)
    yield box["port"]
    stop.set()
    th.join(10)


def test_bench_and_call_against_a_target_and_compare_across_targets(tmp_path, echo_port):
    suite = tone_suite(tmp_path / "suite", names=("alpha",))
    store = tmp_path / "runs.sqlite"
    runner = CliRunner()
    ids = []
    for path in ("/twilio", "/ws"):
        res = runner.invoke(app, ["bench", str(suite), "--target", f"ws://127.0.0.1:{echo_port}{path}",
                                  "--concurrency", "1", "--jitter-ms", "40", "--store", str(store), "--json"])
        assert res.exit_code == 0, res.output
        summary = json.loads(res.stdout[res.stdout.index("{"):])
        lv = summary["levels"][0]
        assert lv["turns"]["answered"] == 2 and abs(lv["v2v_ms"]["p50"] - 540) < 40
        ids.append(summary["run_id"])
    with open_store(store) as st:
        run = st.run(ids[0])
        assert run["status"] == "finished" and run["conditions"]["target"]["protocol"] == "twilio"
        assert run["conditions"]["jitter_ms"] == 40 and run["conditions"]["config"] is None
        [call] = st.calls(ids[0])
        assert call["error"] is None and "agent: " in call["transcript"]
        assert call["extra"]["skipped_checks"]          # an echo reports no tools
    res = runner.invoke(app, ["runs", "compare", ids[0], ids[1], "--store", str(store), "--json"])
    assert res.exit_code == 0, res.output
    cmp = json.loads(res.stdout)
    assert {d["key"] for d in cmp["conditions_differ"]} >= {"target.protocol", "target.url"}
    res = runner.invoke(app, ["call", str(suite / "alpha.yaml"), "--target", f"ws://127.0.0.1:{echo_port}/ws",
                              "--out", str(tmp_path / "call"), "--json"])
    # an echo answers no order: the call ran (its turns measured), its expectations were not met
    assert res.exit_code == 3 and "expectations failed" in res.output, res.output
    turns = [json.loads(x) for x in res.stdout.splitlines() if x.startswith("{")]
    assert len(turns) == 2 and all(abs(t["v2v_ms"] - 560) < 40 for t in turns)   # 60 ms default buffer
    assert (tmp_path / "call" / "call.wav").exists()
