"""The harness's own error, measured on loopback: an echo target that replies a known, fixed delay
after the caller's last voiced sample must be measured at that delay plus the jitter buffer —
at 1 and at 8 calls at once, over both protocols, through the whole bench path (store included).

The tolerance here (±25 ms at p50) is generous because this machine is shared and loaded; the
figure itself (goal ±10 ms) comes from ``bench/remote_echo.py`` on a quiet machine."""

from __future__ import annotations

import statistics
import subprocess
import sys

import pytest

from harness_fakes import tone_suite
from rejoinder.harness.bench import BenchOptions, run_bench
from rejoinder.harness.compare import compare_runs
from rejoinder.harness.remote.target import RemoteTarget, parse_target
from rejoinder.harness.store import open_store
from rejoinder.harness.suite import load_suite

from remote_helpers import NoTranscript, free_port

DELAY_MS, JITTER_MS, TOLERANCE_MS = 500.0, 40.0, 25.0


@pytest.fixture
def echo_port():
    """The echo target in its own process, as a real target is (its pacing is not held up by the
    eight callers' event loop)."""
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "rejoinder.harness.remote.echo", "--port", str(port),
                             "--delay-ms", str(DELAY_MS), "--hang-ms", "300"], stdout=subprocess.PIPE, text=True)
    try:
        assert "echo target" in proc.stdout.readline()
        yield port
    finally:
        proc.terminate()
        proc.wait(10)


async def test_echo_target_is_measured_at_its_delay_at_1_and_8_calls(tmp_path, echo_port):
    _, scs = load_suite(tone_suite(tmp_path / "suite", names=("alpha",)))
    runs = {}
    with open_store(tmp_path / "runs.sqlite") as st:
        for path in ("/twilio", "/ws"):
            spec = parse_target(f"ws://127.0.0.1:{echo_port}{path}", jitter_ms=JITTER_MS)
            target = RemoteTarget(spec, transcriber=NoTranscript())
            run_id = st.begin_run({"target": target.describe()}, suite="tone")
            assert await run_bench(target, scs, st, run_id, BenchOptions(levels=[1, 8])) == "finished"
            runs[path] = run_id
            turns = st.turns(run_id)
            for level in (1, 8):
                v2v = [t["v2v_ms"] for t in turns if t["concurrency"] == level and t["v2v_ms"] is not None]
                assert len(v2v) == 2 * level                  # 2 turns per call, one call per worker
                err = statistics.median(v2v) - (DELAY_MS + JITTER_MS)
                print(f"{path} {level} at once: p50 error {err:+.1f} ms over {len(v2v)} turns")
                assert abs(err) <= TOLERANCE_MS, (path, level, err, sorted(v2v))
                segs = [t["segments"] for t in turns if t["concurrency"] == level and t["v2v_ms"]]
                assert all(s["playout"] == pytest.approx(JITTER_MS, abs=0.1) for s in segs)
            calls = st.calls(run_id)
            assert all(c["error"] is None for c in calls), [c["error"] for c in calls]
        res = compare_runs(st, runs["/twilio"], runs["/ws"])      # across targets
        assert any(d["key"] == "target.url" for d in res["conditions_differ"])
        assert [lv["concurrency"] for lv in res["levels"]] == [1, 8]
