"""Benchmark: what telemetry costs a call — exporting on vs off, side by side in one process.

Plays the bundled real-speech call ``--runs`` times per arm on the embedded stack, alternating the
arms (on, off, off, on, …) so drift in machine load hits both alike. "On" exports every span and
metric over OTLP/HTTP to a loopback receiver running in its own process (its CPU is not counted);
each "on" call ends with a flush, so the export's CPU falls inside that call's window.

Reports per arm the median CPU seconds per call (this process, all threads: models, caller, event
loop, exporter) and their ratio, and V2V p50 over all turns with a bootstrap 95 % interval of the
difference. Targets (issue 11): CPU ratio ≤ 1.02, V2V p50 unchanged beyond noise.

On a busy machine a whole call's CPU varies by more than telemetry costs, so the benchmark also
measures telemetry's own CPU directly in the "on" arm: the observer on the event path, building
spans and histograms when the call ends, the flush, and the SDK's export threads (per-thread CPU
from the OS); ``direct_ratio`` = 1 + that / median CPU per call "off". A warm-up call runs first
and is not counted.

    .venv/bin/python bench/telemetry_overhead.py [--runs 6] [--tts piper|espeak] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil

from rejoinder import telemetry
from rejoinder.cli import BUNDLED_CALL
from rejoinder.config import load_config
from rejoinder.runtime import Runtime, load_caller
from rejoinder.harness.stats import bootstrap_median_diff


def start_receiver(out: Path) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen([sys.executable, "-m", "rejoinder.telemetry.receiver", "--port", "0",
                             "--out", str(out)], stdout=subprocess.PIPE, text=True)
    line = proc.stdout.readline()  # "listening on http://127.0.0.1:PORT (…)"
    return proc, line.split()[2]


class Meter:
    """Thread CPU spent inside telemetry: the observer on the event path and at the call's end,
    the flush, and the SDK's own threads (their names start with ``Otel``)."""

    def __init__(self) -> None:
        self.cpu = 0.0
        self.proc = psutil.Process()

    def wrap(self, tel) -> None:
        meter, observe = self, tel.observe

        def timed_observe(*a, **kw):
            obs = observe(*a, **kw)
            call, finish = obs.__call__, obs.finish

            class Timed(type(obs)):
                def __call__(self, ev):
                    t = time.thread_time()
                    call(ev)
                    meter.cpu += time.thread_time() - t

                def finish(self, *fa, **fkw):
                    t = time.thread_time()
                    finish(*fa, **fkw)
                    meter.cpu += time.thread_time() - t
            obs.__class__ = Timed
            return obs
        tel.observe = timed_observe

    def sdk_threads(self) -> float:
        ids = {t.native_id for t in threading.enumerate() if t.name.startswith("Otel")}
        return sum(t.user_time + t.system_time for t in self.proc.threads() if t.id in ids)


async def main(runs: int, tts: str | None) -> dict:
    spans_file = Path(tempfile.mkdtemp(prefix="rejoinder-otel-")) / "spans.jsonl"
    receiver, endpoint = start_receiver(spans_file)
    try:
        os.environ.update(OTEL_EXPORTER_OTLP_ENDPOINT=endpoint, OTEL_EXPORTER_OTLP_PROTOCOL="http/protobuf")
        from rejoinder.telemetry.hub import Telemetry
        tel = Telemetry.from_env()
        meter = Meter()
        meter.wrap(tel)
        agent = Runtime(load_config(None, tts=tts))
        await agent.warmup()
        turns, phone, sc = await load_caller(BUNDLED_CALL)
        telemetry.install(None)
        await agent.call(turns, caller_phone=phone, tail_ms=sc.tail_ms)  # warm-up, not counted
        direct: list[float] = []
        cpu: dict[str, list[float]] = {"on": [], "off": []}
        v2v: dict[str, list[float]] = {"on": [], "off": []}
        order = [("on", "off")[(i // 2 + i) % 2] for i in range(2 * runs)]  # on off off on on off …
        for i, arm in enumerate(order):
            telemetry.install(tel if arm == "on" else None)
            c0, m0, s0 = time.process_time(), meter.cpu, meter.sdk_threads()
            res = await agent.call(turns, caller_phone=phone, tail_ms=sc.tail_ms)
            if arm == "on":
                t = time.thread_time()
                tel.force_flush(10.0)
                meter.cpu += time.thread_time() - t
            cpu[arm].append(time.process_time() - c0)
            if arm == "on":
                direct.append(meter.cpu - m0 + meter.sdk_threads() - s0)
            v2v[arm].extend(r.v2v_ms() for r in res.turns if r.v2v_ms() is not None)
            print(f"call {i + 1}/{len(order)} ({arm}): CPU {cpu[arm][-1]:.2f} s, V2V "
                  + ", ".join(f"{r.v2v_ms():.0f}" for r in res.turns if r.v2v_ms()), file=sys.stderr)
        telemetry.install(None)
        tel.shutdown(5.0)
        time.sleep(0.5)
    finally:
        receiver.terminate()
        receiver.wait(10)
    spans = sum(1 for _ in open(spans_file)) if spans_file.exists() else 0
    med = {arm: statistics.median(v) for arm, v in cpu.items()}
    d = bootstrap_median_diff(v2v["off"], v2v["on"])
    return {
        "runs_per_arm": runs, "spans_received": spans,
        "cpu_s_per_call_median": {k: round(v, 3) for k, v in med.items()},
        "cpu_ratio_on_off": round(med["on"] / med["off"], 4),
        "telemetry_cpu_ms_per_call_median": round(1000 * statistics.median(direct), 2),
        "direct_ratio": round(1 + statistics.median(direct) / med["off"], 5),
        "v2v_p50_ms": {"on": round(d.median_b, 1), "off": round(d.median_a, 1)},
        "v2v_p50_diff_ms": round(d.diff, 1), "v2v_p50_diff_ci95": [d.low, d.high],
        "v2v_unchanged_beyond_noise": not d.excludes_zero,
        "turns": {k: len(v) for k, v in v2v.items()},
    }


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=6, help="calls per arm")
    ap.add_argument("--tts", default=None)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    out = asyncio.run(main(args.runs, args.tts))
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        print(f"telemetry overhead, {args.runs} calls per arm, interleaved; {out['spans_received']} spans "
              f"received at the loopback OTLP receiver")
        print(f"  CPU per call (median): on {out['cpu_s_per_call_median']['on']:.3f} s, off "
              f"{out['cpu_s_per_call_median']['off']:.3f} s → ratio {out['cpu_ratio_on_off']:.4f} (target ≤ 1.02)")
        print(f"  telemetry's own CPU per call (median): {out['telemetry_cpu_ms_per_call_median']} ms → "
              f"direct ratio {out['direct_ratio']:.5f}")
        print(f"  V2V p50: on {out['v2v_p50_ms']['on']} ms, off {out['v2v_p50_ms']['off']} ms, Δ "
              f"{out['v2v_p50_diff_ms']:+} ms, 95 % CI {out['v2v_p50_diff_ci95']} → "
              + ("no change beyond noise" if out["v2v_unchanged_beyond_noise"] else "CHANGED"))
