"""The harness's own error over a socket: measure a loopback echo target with a known delay.

The echo target (``rejoinder.harness.remote.echo``, started here as its own process) answers
``--delay-ms`` after the caller's last voiced sample. A perfect harness measures every turn at
``delay + jitter buffer``; this prints, per protocol and calls at once, how far the measured V2V is
from that (p50, p95, max |error|), from runs stored like any other (``--store``).

    .venv/bin/python bench/remote_echo.py                       # 1 and 8 calls, both protocols
    .venv/bin/python bench/remote_echo.py --levels 1,4,8 --repeat 3 --delay-ms 600

Goal (issue 9): |p50 error| ≤ 10 ms at 1 and at 8 calls at once.
"""

from __future__ import annotations

import argparse
import asyncio
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import soundfile as sf

from rejoinder.harness.bench import BenchOptions, run_bench
from rejoinder.harness.remote.target import RemoteTarget, parse_target
from rejoinder.harness.store import open_store
from rejoinder.harness.suite import load_suite

SCENARIO = """\
name: echo-{k}
description: two tone turns (the echo target only needs voiced audio and pauses)
turns:
  - audio:
      - file: tone.wav
  - after_agent_ms: {gap}
    audio:
      - file: tone.wav
  - after_agent_ms: {gap}
    audio:
      - file: tone.wav
tail_ms: 600
"""


class NoTranscript:
    async def start(self) -> None:
        pass

    async def text(self, pcm) -> str:
        return ""

    def close(self) -> None:
        pass


def tone_suite(folder: Path, n: int = 2) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    t = np.arange(int(0.7 * 16000)) / 16000
    sf.write(str(folder / "tone.wav"), (0.3 * np.sin(2 * np.pi * 220 * t)).astype(np.float32), 16000)
    for k in range(n):
        (folder / f"echo_{k}.yaml").write_text(SCENARIO.format(k=k, gap=300 + 100 * k))
    return folder


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def measure(url: str, scs, store, levels: list[int], repeat: int, jitter_ms: float,
                  expected: float) -> None:
    target = RemoteTarget(parse_target(url, jitter_ms=jitter_ms), transcriber=NoTranscript())
    await target.probe()
    run_id = store.begin_run({"target": target.describe(), "bench": "remote_echo", "expected_ms": expected},
                             suite="echo", command=" ".join(sys.argv))
    await run_bench(target, scs, store, run_id, BenchOptions(levels=levels, repeat=repeat))
    turns = store.turns(run_id)
    for level in levels:
        err = [t["v2v_ms"] - expected for t in turns if t["concurrency"] == level and t["v2v_ms"] is not None]
        lag = (store.run(run_id)["levels"].get(level) or {}).get("loop_lag_ms", {})
        print(f"{target.spec.protocol:9} {level:2} at once  turns {len(err):3}  error p50 {statistics.median(err):+6.1f}"
              f"  p95 {float(np.percentile(err, 95)):+6.1f}  max|e| {max(abs(e) for e in err):5.1f} ms"
              f"   harness loop lag p99 {lag.get('p99')} ms   run {run_id}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--levels", default="1,8")
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--delay-ms", type=float, default=700.0)
    ap.add_argument("--jitter-ms", type=float, default=60.0)
    ap.add_argument("--protocols", default="twilio,rejoinder")
    ap.add_argument("--store", type=Path, default=None, help="run store (default: a temporary file)")
    args = ap.parse_args()
    levels = [int(x) for x in args.levels.split(",")]
    tmp = Path(tempfile.mkdtemp(prefix="remote-echo-"))
    _, scs = load_suite(tone_suite(tmp / "suite"))
    port = free_port()
    echo = subprocess.Popen([sys.executable, "-m", "rejoinder.harness.remote.echo", "--port", str(port),
                             "--delay-ms", str(args.delay_ms)], stdout=subprocess.PIPE, text=True)
    try:
        echo.stdout.readline()  # "echo target: …" once it listens
        time.sleep(0.2)
        expected = args.delay_ms + args.jitter_ms
        print(f"echo target delay {args.delay_ms:.0f} ms + jitter buffer {args.jitter_ms:.0f} ms = expected V2V "
              f"{expected:.0f} ms; error = measured − expected")
        with open_store(args.store or tmp / "runs.sqlite") as store:
            for proto in args.protocols.split(","):
                path = "/ws" if proto == "rejoinder" else "/twilio"
                asyncio.run(measure(f"ws://127.0.0.1:{port}{path}", scs, store, levels, args.repeat,
                                    args.jitter_ms, expected))
    finally:
        echo.terminate()
        echo.wait(5)


if __name__ == "__main__":
    main()
