"""Benchmark: what the managed endpoint costs for TTS, and what a network profile adds to it.

Three ways to synthesize the same multi-sentence replies with the same engine (Piper, served by
``rejoinder models serve tts`` processes), measured from the agent's side:

* ``sonic-continuation`` — Cartesia's WebSocket, one context per reply, every chunk sent at once
  with ``continue: true`` (the server streams chunk 2 right after chunk 1);
* ``sonic-per-chunk`` — the same socket, one context per chunk, each requested when the previous
  one finished (what the runtime's reply does today);
* ``managed-per-chunk`` — the SageMaker-shaped endpoint: one signed HTTP request and one new event
  stream per chunk (no continuation exists there), 20 ms payload parts.

Per mode: time to first audio of the reply (TTFB) and of later chunks, reply completion, the
underrun a caller would hear if playback started at the first audio (chunk gaps not covered by
audio already received), and — across a network profile — bytes on the wire per second of audio
(IP packets counted on the link's device, compared with raw 16 kHz int16 PCM: 32 000 B/s).

    .venv/bin/python bench/hosting_tts.py [--network regional] [--replies 6] [--json]

Needs CAP_NET_ADMIN for any profile but ``loopback`` (bytes on the wire are measured only there).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import secrets
import statistics
import time
from pathlib import Path

import psutil

from rejoinder.adapters.cartesia_tts import CartesiaTTS
from rejoinder.adapters.sagemaker_tts import SageMakerTTS
from rejoinder.hosting.network import Link, profile
from rejoinder.hosting.servers import ServerProcess, probe_tts

REPLIES = [
    ["Order four two one seven has shipped.", "Your wireless headphones should arrive on Wednesday.",
     "Is there anything else I can help with?"],
    ["I found your appointment.", "Your haircut is on Friday at ten in the morning.",
     "Would you like to move it?"],
    ["Done.", "I moved your haircut to Thursday afternoon at two.", "You will get a text to confirm."],
]
RATE = 16000


def underrun_ms(arrivals: list[tuple[float, float]]) -> float:
    """Silence a caller hears: pieces ``(arrival_ms, duration_ms)`` played back to back from the
    first arrival; a piece that arrives after the audio before it ran out leaves a gap."""
    if not arrivals:
        return 0.0
    play_end = arrivals[0][0]
    gap = 0.0
    for t, d in arrivals:
        if t > play_end:
            gap += t - play_end
            play_end = t
        play_end += d
    return gap


async def one_reply(mode: str, chunks: list[str], sonic: CartesiaTTS, managed: SageMakerTTS) -> dict:
    t0 = time.perf_counter()
    arrivals: list[tuple[float, float]] = []
    firsts: list[float] = []

    def got(pcm) -> None:
        now = 1000.0 * (time.perf_counter() - t0)
        if len(pcm):
            arrivals.append((now, 1000.0 * len(pcm) / RATE))

    if mode == "sonic-continuation":
        async def texts():
            for c in chunks:
                yield c + " "
        async for piece in sonic.stream_many(texts()):
            if not firsts and len(piece.pcm):
                firsts.append(1000.0 * (time.perf_counter() - t0))
            got(piece.pcm)
    else:
        tts = sonic if mode == "sonic-per-chunk" else managed
        for c in chunks:
            asked = time.perf_counter()
            first = True
            async for piece in tts.stream(c):
                if first and len(piece.pcm):
                    firsts.append(1000.0 * (time.perf_counter() - asked))
                    first = False
                got(piece.pcm)
    return {"ttfb_ms": firsts[0], "later_ttfb_ms": firsts[1:], "done_ms": 1000.0 * (time.perf_counter() - t0),
            "audio_ms": sum(d for _, d in arrivals), "underrun_ms": underrun_ms(arrivals)}


def _net_bytes(dev: str | None) -> int | None:
    if dev is None:
        return None
    c = psutil.net_io_counters(pernic=True).get(dev)
    return None if c is None else c.bytes_recv + c.bytes_sent


async def main(network: str, replies: int, logs: Path) -> dict:
    prof = profile(network)
    key = secrets.token_hex(8)
    aws = ("AKID" + secrets.token_hex(6).upper(), secrets.token_hex(12))
    link = Link(prof, index=11) if prof.name != "loopback" else None
    if link:
        link.up()
    host = link.server_ip if link else "127.0.0.1"
    prefix = link.exec_prefix() if link else []
    logs.mkdir(parents=True, exist_ok=True)
    servers = [ServerProcess("sonic", ["tts", "--protocol", "cartesia", "--host", host, "--port", "47391",
                                       "--api-key", key], prefix, log_path=str(logs / "sonic.log")),
               ServerProcess("managed", ["tts", "--protocol", "sagemaker", "--host", host, "--port", "47392"],
                             prefix, env={"AWS_ACCESS_KEY_ID": aws[0], "AWS_SECRET_ACCESS_KEY": aws[1]},
                             log_path=str(logs / "managed.log"))]
    try:
        await asyncio.gather(*(s.start() for s in servers))
        sonic = CartesiaTTS(f"ws://{host}:47391", key)
        managed = SageMakerTTS("rejoinder-tts", base_url=f"http://{host}:47392", aws_access_key_id=aws[0],
                               aws_secret_access_key=aws[1])
        await probe_tts(sonic)
        await probe_tts(managed)
        out: dict = {"network": link.describe() if link else prof.model_dump(), "modes": {}}
        for mode in ("sonic-continuation", "sonic-per-chunk", "managed-per-chunk"):
            rows = []
            before = _net_bytes(link.dev_agent if link else None)
            for i in range(replies):
                rows.append(await one_reply(mode, REPLIES[i % len(REPLIES)], sonic, managed))
            after = _net_bytes(link.dev_agent if link else None)
            audio_s = sum(r["audio_ms"] for r in rows) / 1000.0
            later = [x for r in rows for x in r["later_ttfb_ms"]]
            out["modes"][mode] = {
                "replies": len(rows),
                "ttfb_ms_p50": round(statistics.median(r["ttfb_ms"] for r in rows), 1),
                "later_chunk_ttfb_ms_p50": round(statistics.median(later), 1) if later else None,
                "reply_done_ms_p50": round(statistics.median(r["done_ms"] for r in rows), 1),
                "underrun_ms_mean": round(statistics.fmean(r["underrun_ms"] for r in rows), 1),
                "wire_bytes_per_audio_s": round((after - before) / audio_s) if after is not None else None,
                "wire_overhead_x": round((after - before) / audio_s / (2 * RATE), 2) if after is not None else None,
            }
        await sonic.aclose()
        await managed.aclose()
        return out
    finally:
        for s in servers:
            s.stop()
        if link:
            link.down()


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--network", default="loopback")
    ap.add_argument("--replies", type=int, default=6)
    ap.add_argument("--logs", type=Path, default=Path("out/bench-hosting-tts"))
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    res = asyncio.run(main(a.network, a.replies, a.logs))
    if a.json:
        print(json.dumps(res, indent=2))
    else:
        print(f"network: {res['network'].get('name')} (RTT {res['network'].get('rtt_ms')} ms, "
              f"emulator {res['network'].get('emulator')})")
        head = ("mode", "TTFB p50", "later chunks TTFB p50", "reply done p50", "underrun mean",
                "wire B per audio s", "× raw PCM")
        print("  ".join(f"{h:>22}" for h in head))
        for mode, m in res["modes"].items():
            vals = (mode, m["ttfb_ms_p50"], m["later_chunk_ttfb_ms_p50"], m["reply_done_ms_p50"],
                    m["underrun_ms_mean"], m["wire_bytes_per_audio_s"], m["wire_overhead_x"])
            print("  ".join(f"{'—' if v is None else v!s:>22}" for v in vals))
