"""The speech-to-speech session's own logic on scripted service events (virtual clock): which
boundary each event stamps, tools run in the agent and answered with toolResult, barge-in."""

from __future__ import annotations

import asyncio
import base64
import json

import numpy as np

from rejoinder.adapters.nova_sonic_events import BARGE_IN, OutputParser
from rejoinder.clock import VirtualClock
from rejoinder.events import AgentSpeech, EventBus
from rejoinder.s2s import S2SSession
from rejoinder.stages import Stamper
from rejoinder.timeline import Timeline
from rejoinder.tools import CallContext

from tests.fakes import ToolLog, scripted_agent


class FakeStream:
    def __init__(self) -> None:
        self.q: asyncio.Queue = asyncio.Queue()
        self.audio = 0
        self.results: list[tuple[str, str]] = []
        self.parser = OutputParser()

    def send_audio(self, pcm) -> None:
        self.audio += 1

    def send_tool_result(self, tool_use_id, text) -> None:
        self.results.append((tool_use_id, text))

    async def events(self):
        while (raw := await self.q.get()) is not None:
            yield self.parser.parse(raw)

    async def close(self) -> None:
        self.q.put_nowait(None)

    def put(self, name, **body) -> None:
        self.q.put_nowait(json.dumps({"event": {name: {"sessionId": "s", "promptName": "p", "completionId": "c",
                                                        **body}}}))


def _tone(ms):
    t = np.arange(int(16 * ms)) / 16000
    return base64.b64encode((8000 * np.sin(2 * np.pi * 300 * t)).astype("<i2").tobytes()).decode()


async def _settle():
    for _ in range(20):
        await asyncio.sleep(0)


async def test_events_stamp_the_boundaries_and_tools_run_in_the_agent():
    clock, bus = VirtualClock(), EventBus()
    tl, seen = Timeline(), []
    bus.subscribe(tl)
    bus.subscribe(seen.append)
    log = ToolLog()
    stream = FakeStream()
    s = S2SSession(Stamper("c1", clock, bus), stream, scripted_agent(log), CallContext("c1"), model="nova")
    s.on_frame(np.zeros(320, np.int16), 0.0)
    assert stream.audio == 1
    await clock.advance(1000)
    stream.put("completionStart")
    stream.put("contentStart", contentId="u", type="TEXT", role="USER", additionalModelFields='{"generationStage":"FINAL"}')
    stream.put("textOutput", contentId="u", content="Where is order 4217?")
    await _settle()
    await clock.advance(200)
    stream.put("contentStart", contentId="t", type="TOOL", role="TOOL")
    stream.put("toolUse", contentId="t", toolName="lookup_order", toolUseId="use-1",
               content=json.dumps({"order_id": "4217", "text": "x"}))
    await _settle()
    assert log.executed == ["x"] and stream.results[0][0] == "use-1"
    assert json.loads(stream.results[0][1]) == {"order_id": "4217", "status": "shipped"}
    await clock.advance(300)
    stream.put("contentStart", contentId="sp", type="TEXT", role="ASSISTANT",
               additionalModelFields='{"generationStage":"SPECULATIVE"}')
    stream.put("textOutput", contentId="sp", content="It has shipped.")
    await _settle()
    await clock.advance(100)
    stream.put("contentStart", contentId="a", type="AUDIO", role="ASSISTANT")
    stream.put("audioOutput", contentId="a", content=_tone(400))
    stream.put("contentEnd", contentId="a", type="AUDIO", stopReason="END_TURN")
    stream.put("completionEnd", stopReason="END_TURN")
    await _settle()
    t = 1600.0
    while s.playout.reply is not None:
        s.tick_playout(t)
        t += 20.0
    st = tl.turn(1).stamps
    assert st["eot_decided"] == st["transcript_final"] == 1000.0
    assert st["llm_first_token"] == st["first_speakable_text"] == 1500.0
    assert st["tts_first_audio"] == st["first_audio_out"] == 1600.0
    assert st["playback_start"] >= 1600.0 and "answer_start" in st and "playback_end" in st
    assert tl.turn(1).tools[0]["name"] == "lookup_order" and tl.turn(1).transcript == "Where is order 4217?"
    [speech] = [e for e in seen if isinstance(e, AgentSpeech)]
    assert speech.heard_text == "It has shipped." and not speech.interrupted
    assert [m.role for m in s.conv.history] == ["user", "assistant", "tool"]  # its text and its call, then the result
    await s.close()


async def test_barge_in_clears_the_line_and_keeps_only_what_was_heard():
    clock, bus = VirtualClock(), EventBus()
    seen: list = []
    bus.subscribe(seen.append)
    stream = FakeStream()
    s = S2SSession(Stamper("c2", clock, bus), stream, scripted_agent(), CallContext("c2"), model="nova")
    stream.put("contentStart", contentId="u", type="TEXT", role="USER")
    stream.put("textOutput", contentId="u", content="Hello.")
    stream.put("contentStart", contentId="sp", type="TEXT", role="ASSISTANT",
               additionalModelFields='{"generationStage":"SPECULATIVE"}')
    stream.put("textOutput", contentId="sp", content="one two three four five six seven eight")
    stream.put("contentStart", contentId="a", type="AUDIO", role="ASSISTANT")
    stream.put("audioOutput", contentId="a", content=_tone(2000))
    await _settle()
    for k in range(25):  # 500 ms of the 2 s reply heard
        s.tick_playout(20.0 * k)
    stream.put("contentStart", contentId="x", type="TEXT", role="ASSISTANT",
               additionalModelFields='{"generationStage":"FINAL"}')
    stream.put("textOutput", contentId="x", content=BARGE_IN)
    await _settle()
    assert s.playout.reply is None  # cleared at once
    [speech] = [e for e in seen if isinstance(e, AgentSpeech)]
    assert speech.interrupted and speech.heard_text == "one two"  # 25 % of the audio, 8 words
    stream.put("audioOutput", contentId="a", content=_tone(200))  # late audio of the cut reply
    await _settle()
    assert s.playout.reply is None
    await s.close()
