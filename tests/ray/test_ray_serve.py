"""`rejoinder serve --ray` on a local cluster it starts itself: the agent app as a Ray Serve
deployment answers /health and takes one Media Streams call (zero-cost models), its report is
served through the proxy, and the serve run is stored when the server stops on SIGTERM."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).parent.parent / "harness"))

from remote_helpers import NoTranscript, free_port, tone_turns  # noqa: E402
from rejoinder.harness.remote.target import RemoteTarget, parse_target  # noqa: E402
from rejoinder.harness.store import SQLiteStore  # noqa: E402

TOKEN = "ray-serve-test-token"


def start(port: int, store: Path) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "rejoinder", "serve", "--ray", "local", "--ray-cpus", "2", "--zero-cost",
           "--port", str(port), "--token", TOKEN, "--max-replicas", "1", "--duration-s", "240", "--runs", str(store)]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=dict(os.environ))


def wait_ready(proc: subprocess.Popen, timeout_s: float = 240.0) -> str:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if line.startswith("ready "):
            return line
        if not line and proc.poll() is not None:
            raise AssertionError(f"serve --ray exited {proc.returncode}: {proc.stderr.read()[-3000:]}")
    raise AssertionError("serve --ray never said ready")


async def test_serve_on_ray_answers_health_and_a_twilio_call(tmp_path):
    port, store = free_port(), tmp_path / "runs.sqlite"
    proc = start(port, store)
    try:
        ready = wait_ready(proc)
        assert ready.startswith(f"ready http://127.0.0.1:{port} run ")
        run_id = ready.split()[3]
        health = httpx.get(f"http://127.0.0.1:{port}/health", timeout=10).json()
        assert health["models"] == "ready" and health["calls"] == 0 and health["max_calls"] == 4
        target = RemoteTarget(parse_target(f"ws://127.0.0.1:{port}/twilio", token=TOKEN), transcriber=NoTranscript())
        await target.probe()
        assert target.info["server"] == "rejoinder serve"
        res = await target.call(tone_turns(1), caller_phone="+15550101", tail_ms=800)
        assert res.error is None, res.error
        [rec] = [r for r in res.turns if r.v2v_ms() is not None]
        # the replica's report reached the caller through the proxy: its moments split the wait
        assert {"arrival", "playout"} <= set(rec.segments()) and len(rec.segments()) >= 4, rec.segments()
        assert res.target["self_reported"][0]["v2v_ms"] is not None
        report = httpx.get(f"http://127.0.0.1:{port}/calls/{res.target['ref']}",
                           headers={"Authorization": f"Bearer {TOKEN}"}, timeout=10).json()
        assert report["status"] == "ended" and report["replica"]
    finally:
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err[-3000:]
    assert '"event": "stopped"' in out
    st = SQLiteStore(store)
    run = st.run(run_id)
    assert run["status"] == "finished" and run["conditions"]["ray"]["cpus"] == 2
    assert run["conditions"]["models"]["name"] == "zero-cost"
    assert run["conditions"]["deployments"]["agent"]["autoscaling_config"]["target_ongoing_requests"] == 2.0
    assert any("deployed in" in n["text"] for n in run["notes"])
    st.close()
