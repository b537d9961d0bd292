"""``rejoinder serve --ray`` under a changing load: starts the agent on a local Ray cluster
(zero-cost models, 1–2 replicas, 2 calls per replica targeted, 4 at most), drives it over
``/twilio`` with ``rejoinder bench --target`` at 6 then 1 call(s) at once, stops it, and prints
each scaling event, the calls that failed, and the calls a removed replica drained.

    .venv/bin/python bench/ray_serve_scaling.py [--levels 6,1] [--repeat 2]

Both runs (the serve run with the scaling events, the bench run with the calls) land in
``--store`` (default out/ray_serve_scaling/runs.sqlite).
"""

from __future__ import annotations

import argparse
import json
import signal
import socket
import subprocess
import sys
from pathlib import Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--levels", default="6,1")
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--scenarios", default="order-digits-real")
    ap.add_argument("--store", default="out/ray_serve_scaling/runs.sqlite")
    a = ap.parse_args()
    Path(a.store).parent.mkdir(parents=True, exist_ok=True)
    port, token = free_port(), "scaling-bench-token"
    serve = [sys.executable, "-m", "rejoinder", "serve", "--ray", "local", "--ray-cpus", "2", "--zero-cost",
             "--port", str(port), "--token", token, "--min-replicas", "1", "--max-replicas", "2", "--target-calls", "2",
             "--max-calls", "4", "--downscale-delay-s", "5", "--duration-s", "1200", "--runs", a.store]
    print("$ rejoinder " + " ".join(serve[3:]), file=sys.stderr, flush=True)
    srv = subprocess.Popen(serve, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    events: list[dict] = []
    try:
        for line in srv.stdout:
            if line.startswith("ready "):
                serve_run = line.split()[3]
                print(line.strip(), file=sys.stderr)
                break
        else:
            sys.exit("serve --ray stopped before it was ready")
        cmd = [sys.executable, "-m", "rejoinder", "bench", "--target", f"ws://127.0.0.1:{port}/twilio", "--target-token",
               token, "--scenarios", a.scenarios, "--concurrency", a.levels, "--repeat", str(a.repeat), "--store",
               a.store, "--json"]
        print("$ rejoinder " + " ".join(cmd[3:]), file=sys.stderr, flush=True)
        out = subprocess.run(cmd, capture_output=True, text=True)
        if out.returncode != 0:
            sys.exit(f"bench failed: {out.stderr[-2000:]}")
        summary = json.loads(out.stdout)
    finally:
        srv.send_signal(signal.SIGTERM)
        rest, _ = srv.communicate(timeout=300)
    end = {}
    for line in rest.splitlines():
        if line.startswith("{"):
            ev = json.loads(line)
            (events.append(ev) if ev["event"] != "stopped" else end.update(ev))
    print(f"serve run {serve_run}; bench run {summary['run_id']}")
    for ev in events:
        print(f"  {ev['at_s']:7.1f} s  {ev['kind']:10} {ev['deployment']}: {ev['from']} → {ev['to']}  "
              f"calls in progress {ev['calls_in_progress']}")
    for lv in summary["levels"]:
        print(f"  {lv['concurrency']} at once: {lv['calls']} calls, {lv['failed_calls']} failed, V2V p50/p95/p99 "
              f"{lv['v2v_ms']['p50']}/{lv['v2v_ms']['p95']}/{lv['v2v_ms']['p99']} ms")
    drained = end.get("drained_calls", [])
    print(f"  calls drained by a replica being removed: {len(drained)}; how they ended: "
          f"{[d.get('ended') for d in drained]}")
    print(f"  calls per replica: {end.get('served')}")


if __name__ == "__main__":
    main()
