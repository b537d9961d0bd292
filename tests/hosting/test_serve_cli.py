"""``rejoinder models serve``: a real server process, its ready line, clean stop, clear errors."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys

from rejoinder.adapters.cartesia_tts import CartesiaTTS


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _serve(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "rejoinder", "models", "serve", *args],
                          capture_output=True, text=True, timeout=120)


async def test_tts_server_process_serves_and_stops_on_sigterm():
    port = _port()
    proc = subprocess.Popen([sys.executable, "-m", "rejoinder", "models", "serve", "tts", "--engine", "espeak",
                             "--port", str(port), "--api-key", "secret-key"], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == f"ready ws://127.0.0.1:{port}/tts/websocket"
        tts = CartesiaTTS(f"ws://127.0.0.1:{port}", "secret-key")
        pieces = [p async for p in tts.stream("Hello there.")]
        assert sum(len(p.pcm) for p in pieces) > 16000 * 0.3
        await tts.aclose()
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=20) == 0


def test_bad_arguments_are_clear_errors():
    res = _serve("stt", "--protocol", "sagemaker", "--port", "1")
    assert res.returncode == 2 and "cannot serve 'stt' over 'sagemaker'" in res.stderr
    res = _serve("tts", "--engine", "kokoro", "--port", str(_port()))
    assert res.returncode == 2 and "kokoro" in res.stderr and "espeak" in res.stderr
    res = _serve("tts", "--engine", "espeak", "--faults", "tts:explode", "--port", str(_port()))
    assert res.returncode == 2 and "tts:explode" in res.stderr
