"""One process vs Ray: the same zero-cost workload (N simulated callers at once) run by
``rejoinder bench --zero-cost`` in one process and with ``--ray local`` on W worker processes;
prints both runs' V2V percentiles (merged from every turn's raw sample) and how far apart their
p99s are, with the loop lag and CPU of each.

    .venv/bin/python bench/ray_callers.py --callers 200 --workers 4 --repeat 1

Both runs land in the store (``--store``, default out/ray_callers/runs.sqlite); `rejoinder runs
compare A B` puts them side by side. Zero-cost models: the figures are the orchestration's and the
callers' own (see rejoinder.harness.zerocost), not the models'.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path


def bench(args: list[str]) -> dict:
    cmd = [sys.executable, "-m", "rejoinder", "bench", "--zero-cost", "--json", *args]
    print("$ " + " ".join(["rejoinder", *cmd[3:]]), file=sys.stderr, flush=True)
    out = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if out.returncode != 0:
        sys.exit(f"bench failed ({out.returncode}): {out.stderr[-2000:]}")
    return json.loads(out.stdout)


TONES = """\
name: tones-{k}
description: three caller turns of a steady tone (no pauses inside a turn), each 400 ms after the agent
turns:
  - audio: [{{file: tone.wav}}]
  - after_agent_ms: 400
    audio: [{{file: tone.wav}}]
  - after_agent_ms: 400
    audio: [{{file: tone.wav}}]
tail_ms: 800
"""


def tone_suite(folder: Path) -> Path:
    """A suite whose caller turns have no pauses inside them, so the zero-cost agent answers each
    turn once whatever the timing (real speech with pauses makes it answer, and be interrupted, at
    each pause: more or fewer turns as the load shifts the timing)."""
    import numpy as np
    import soundfile as sf
    folder.mkdir(parents=True, exist_ok=True)
    t = np.arange(int(1.2 * 16000)) / 16000
    sf.write(str(folder / "tone.wav"), (0.3 * np.sin(2 * np.pi * 220 * t)).astype(np.float32), 16000, subtype="PCM_16")
    for k in range(2):
        (folder / f"tones-{k}.yaml").write_text(TONES.format(k=k))
    return folder


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--callers", type=int, default=200, help="simulated callers at once")
    ap.add_argument("--workers", type=int, default=4, help="Ray worker processes")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--scenarios", default=None, help="scenarios of the bundled suite (default: a tone suite)")
    ap.add_argument("--store", default="out/ray_callers/runs.sqlite")
    a = ap.parse_args()
    Path(a.store).parent.mkdir(parents=True, exist_ok=True)
    common = ["--concurrency", str(a.callers), "--repeat", str(a.repeat), "--store", a.store, "--call-timeout", "300"]
    common = ([*common, "--scenarios", a.scenarios] if a.scenarios else
              [str(tone_suite(Path(a.store).parent / "tones")), *common])
    one = bench(common)
    ray = bench([*common, "--ray", "local", "--ray-cpus", str(a.workers), "--ray-workers", str(a.workers)])
    rows = []
    for label, s in (("one process", one), (f"Ray, {a.workers} workers", ray)):
        lv = s["levels"][0]
        r = lv.get("resources") or {}
        rows.append((label, s["run_id"], lv["calls"], lv["failed_calls"], lv["turns"].get("answered", 0), lv["v2v_ms"],
                     (r.get("loop_lag_ms") or {}).get("p99"), r.get("cpu_pct")))
    print(f"{'':22} {'run':22} {'calls':>5} {'failed':>6} {'turns':>5} {'p50':>7} {'p95':>7} {'p99':>7} "
          f"{'lag p99':>8} {'CPU%':>6}")
    for label, rid, n, bad, turns, v, lag, cpu in rows:
        print(f"{label:22} {rid:22} {n:5d} {bad:6d} {turns:5d} {v['p50']:7.1f} {v['p95']:7.1f} {v['p99']:7.1f} "
              f"{lag if lag is not None else float('nan'):8.1f} {cpu if cpu is not None else float('nan'):6.1f}")
    p1, p2 = rows[0][5]["p99"], rows[1][5]["p99"]
    print(f"p99 Ray vs one process: {100.0 * (p2 - p1) / p1:+.2f} % (bound ±5 %)")


if __name__ == "__main__":
    main()
