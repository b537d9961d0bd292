"""Transfer to a person and hang-up as tools over real sockets: over /twilio the transfer
webhook (a local HTTP server on 127.0.0.1) receives the <Dial> TwiML once the reply's end mark
came back; over /ws the page gets a ``transfer`` message; both close with 1000."""

from __future__ import annotations

import contextlib
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
import websockets

from rejoinder import Agent
from rejoinder.calltools import end_call, transfer_to_human
from rejoinder.clock import RealClock
from rejoinder.ports import ToolCall
from rejoinder.server.app import ServerConfig, create_app
from rejoinder.session import Stack

from fakes import AmplitudeVAD, ScriptedLLM, ScriptedSTT, ScriptedTurn, ToneTTS
from helpers import TOKEN, BrowserLikeClient, FakeProvider, ServerThread, read_timeline, silence, tone
from test_twilio import FakeTwilio


class ToolProvider(FakeProvider):
    """The agent has one call tool, and the scripted LLM calls it on the caller's first words
    (``said``: a closing for ``end_call``, which is offered only on one)."""

    def __init__(self, call_tool, tool_name: str, tokens: list[str],
                 said: str = "I'd like a person.") -> None:
        super().__init__(texts=[said], tokens=tokens)
        self.agent = Agent("Test.", tools=[call_tool])
        self.tool_name = tool_name

    def new_stack(self) -> Stack:
        clock = RealClock()
        return Stack(vad=AmplitudeVAD(), turn=ScriptedTurn(clock, prob=0.9),
                     stt=ScriptedSTT(clock, self.texts, delay_ms=self.stt_ms),
                     llm=ScriptedLLM(clock, self.tokens, ttft_ms=100.0,
                                     calls=[ToolCall("", self.tool_name, {})]),
                     tts=ToneTTS(clock, ttfb_ms=60.0))


class Webhook:
    """A loopback HTTP server that records the JSON bodies POSTed to it."""

    def __init__(self) -> None:
        self.bodies: list[dict] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802
                n = int(self.headers.get("Content-Length", 0))
                outer.bodies.append(json.loads(self.rfile.read(n)))
                self.send_response(204)
                self.end_headers()

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}/transfer"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


async def test_twilio_transfer_runs_the_webhook_after_the_end_mark(tmp_path):
    hook = Webhook()
    provider = ToolProvider(transfer_to_human("+15550199"), "transfer_to_human", ["Connecting", " you", " now."])
    srv = ServerThread(create_app(ServerConfig(token=TOKEN, store_dir=tmp_path, transfer_webhook=hook.url),
                                  provider)).__enter__()
    try:
        tw = FakeTwilio(f"ws://{srv.base}/twilio", np.concatenate([silence(300), tone(800), silence(12000)]))
        await tw.run()
    finally:
        srv.__exit__()
        hook.close()
    assert tw.close_code == 1000
    assert [m["mark"]["name"] for m in tw.of("mark")][-1] == "e1"  # the reply's end mark was sent
    assert hook.bodies == [{"call_sid": "CA1", "stream_sid": tw.sid, "call_id": hook.bodies[0]["call_id"],
                            "target": "+15550199", "reason": "caller asked for a person",
                            "twiml": "<Response><Dial>+15550199</Dial></Response>"}]
    lines, meta = read_timeline(tmp_path)
    assert meta["ended"]["reason"] == "the agent transferred the call"
    assert meta["transfer"]["status"] == 204 and meta["transfer"]["action"] == "webhook"
    ends = [x["status"] for x in lines if x.get("type") == "CallEnd"]
    assert ends == ["requested", "confirmed", "transferred"]  # confirmed by the e1 echo
    marks = [x for x in lines if x.get("type") == "Boundary" and x["name"] == "playback_end"
             and x["data"].get("source") == "twilio_mark"]
    confirmed = next(x for x in lines if x.get("type") == "CallEnd" and x["status"] == "confirmed")
    assert marks and marks[-1]["t_ms"] <= confirmed["t_ms"]


async def test_browser_gets_a_transfer_message_and_a_hang_up_waits_for_its_playout(tmp_path):
    provider = ToolProvider(transfer_to_human(), "transfer_to_human", ["Connecting", " you."])
    srv = ServerThread(create_app(ServerConfig(token=TOKEN, store_dir=tmp_path), provider)).__enter__()
    try:
        client = BrowserLikeClient(f"ws://{srv.base}/ws")
        with contextlib.suppress(websockets.ConnectionClosed):  # the server hangs up mid-stream
            await client.call(np.concatenate([silence(300), tone(800)]), tail_ms=12000)
    finally:
        srv.__exit__()
    assert client.close_code == 1000
    [msg] = client.of_type("transfer")
    assert msg == {"type": "transfer", "turn_id": 1, "target": None, "reason": "caller asked for a person"}
    lines, meta = read_timeline(tmp_path)
    assert [x["status"] for x in lines if x.get("type") == "CallEnd"] == ["requested", "confirmed", "transferred"]
    end = next(x for x in lines if x.get("type") == "Boundary" and x["name"] == "playback_end"
               and x["data"].get("source") == "client")
    confirmed = next(x for x in lines if x.get("type") == "CallEnd" and x["status"] == "confirmed")
    assert end["t_ms"] <= confirmed["t_ms"] + 1.0  # the page had played the reply out


async def test_end_call_over_twilio_closes_after_the_goodbye_mark(tmp_path):
    provider = ToolProvider(end_call(), "end_call", ["Goodbye", " then."], said="That's all, bye.")
    srv = ServerThread(create_app(ServerConfig(token=TOKEN, store_dir=tmp_path), provider)).__enter__()
    try:
        tw = FakeTwilio(f"ws://{srv.base}/twilio", np.concatenate([silence(300), tone(800), silence(12000)]))
        await tw.run()
    finally:
        srv.__exit__()
    assert tw.close_code == 1000
    lines, meta = read_timeline(tmp_path)
    assert meta["ended"]["reason"] == "the agent hung up (end_call)"
    assert [x["status"] for x in lines if x.get("type") == "CallEnd"] == ["requested", "confirmed"]
