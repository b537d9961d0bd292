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


async def test_llm_server_process_calls_tools_and_stops_on_sigterm():
    """``models serve llm``: llama.cpp's OpenAI server with rejoinder's tool calling; the
    OpenAI-compatible adapter gets a streamed tool call; SIGTERM stops the server child too."""
    import psutil

    from rejoinder.adapters.openai_llm import OpenAICompatLLM
    from rejoinder.ports import ChatMessage, LLMRequest, ToolCall, ToolSchema

    port = _port()
    proc = subprocess.Popen([sys.executable, "-m", "rejoinder", "models", "serve", "llm", "--port", str(port)],
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == f"ready http://127.0.0.1:{port}/v1"
        children = psutil.Process(proc.pid).children(recursive=True)
        assert children, "the llama.cpp server runs as a child process"
        llm = OpenAICompatLLM(base_url=f"http://127.0.0.1:{port}/v1", model="smollm2")
        tool = ToolSchema(name="lookup_order", description="Look up an order by its number.",
                          parameters={"type": "object", "properties": {"order_id": {
                              "type": "string", "pattern": "^[0-9]{4}$"}}, "required": ["order_id"]})
        req = LLMRequest(messages=(ChatMessage("system", "You help callers with their orders."),
                                   ChatMessage("user", "Where is order 4217?")),
                         tools=[tool], tool_choice="required", max_tokens=40)
        out = [d async for d in llm.stream(req)]
        calls = [d for d in out if isinstance(d, ToolCall)]
        assert len(calls) == 1 and calls[0].name == "lookup_order"
        assert calls[0].arguments == {"order_id": "4217"}
        await llm.aclose()
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=20) == 0
    assert not any(c.is_running() and c.status() != psutil.STATUS_ZOMBIE for c in children)


def test_bad_arguments_are_clear_errors():
    res = _serve("stt", "--protocol", "sagemaker", "--port", "1")
    assert res.returncode == 2 and "cannot serve 'stt' over 'sagemaker'" in res.stderr
    res = _serve("tts", "--engine", "kokoro", "--port", str(_port()))
    assert res.returncode == 2 and "kokoro" in res.stderr and "espeak" in res.stderr
    res = _serve("tts", "--engine", "espeak", "--faults", "tts:explode", "--port", str(_port()))
    assert res.returncode == 2 and "tts:explode" in res.stderr
