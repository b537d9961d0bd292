"""The local Nova Sonic service over a real loopback WebSocket: the event protocol both ways, tool
use round trips, endpointing, errors — and once end to end with the real embedded models."""

from __future__ import annotations

import json

import numpy as np
import pytest
import yaml

from rejoinder.adapters.nova_sonic import NovaSonic
from rejoinder.hosting import local
from rejoinder.ports import PortError, ToolCall, ToolSchema, Transcript, TTSAudio

from tests.fakes import AmplitudeVAD

TOOL = ToolSchema("lookup_order", "Look up an order.", {"type": "object", "properties": {"order_id": {"type": "string"}}})


class FakeSTT:
    sample_rate = 16000

    def __init__(self) -> None:
        self.seconds: list[float] = []

    async def stream(self, audio):
        n = 0
        async for x in audio:
            n += len(x)
        self.seconds.append(n / 16000)
        yield Transcript("Where is order 4217?", True)


class FakeLLM:
    """Calls lookup_order for a caller's message, speaks after a tool result."""

    model_name = "fake"

    def __init__(self) -> None:
        self.requests = []

    async def stream(self, request):
        self.requests.append(request)
        if request.messages[-1].role == "user" and request.tool_choice != "none":
            yield ToolCall("c1", "lookup_order", {"order_id": "4217"})
            return
        for tok in ["Your", " order", " 4217", " has", " shipped", "."]:
            yield tok


class FakeTTS:
    sample_rate = 16000
    voice_name = "tone"

    async def stream(self, text):
        t = np.arange(3200) / 16000
        yield TTSAudio((8000 * np.sin(2 * np.pi * 440 * t)).astype(np.int16))


async def _collect(stream, until="completionEnd", results=None):
    out = []
    async for e in stream.events():
        out.append(e)
        if e.name == "toolUse" and results is not None:
            stream.send_tool_result(e.body["toolUseId"], json.dumps(results))
        if e.name == until:
            return out
    return out


async def test_a_typed_turn_with_a_tool_round_trip_follows_the_documented_order():
    llm = FakeLLM()
    async with local.nova_sonic(FakeSTT(), llm, FakeTTS(), AmplitudeVAD) as (srv, url):
        stream = await NovaSonic(url).open("You are a test agent.", (TOOL,), max_tokens=40, temperature=0.0)
        stream.send_text("Where is order 4217?")
        events = await _collect(stream, results={"status": "shipped"})
        await stream.close()
    seq = [(e.name, e.role, e.kind, e.stage) for e in events if e.name != "audioOutput"]
    assert seq[0][0] == "completionStart"
    use = next(i for i, e in enumerate(events) if e.name == "toolUse")
    assert events[use].arguments == {"order_id": "4217"} and events[use].body["toolName"] == "lookup_order"
    assert events[use + 1].name == "contentEnd" and events[use + 1].body["stopReason"] == "TOOL_USE"
    spec = next(i for i, e in enumerate(events) if e.name == "textOutput" and e.stage == "SPECULATIVE")
    first_audio = next(i for i, e in enumerate(events) if e.name == "audioOutput")
    assert use < spec < first_audio  # tool, then what it plans to say, then its audio
    assert events[spec].role == "ASSISTANT" and "shipped" in events[spec].text
    audio_end = next(e for e in events if e.name == "contentEnd" and e.kind == "AUDIO")
    assert audio_end.body["stopReason"] == "END_TURN"
    final = [e for e in events if e.name == "textOutput" and e.stage == "FINAL"]
    assert final and final[-1].text == "Your order 4217 has shipped."
    assert events[-1].name == "completionEnd"
    # the system prompt, tools and the client's toolResult reached the LLM
    second = llm.requests[1]
    assert second.messages[0].role == "system" and second.messages[0].content == "You are a test agent."
    assert second.tools == (TOOL,)
    assert second.messages[-1].role == "tool" and json.loads(second.messages[-1].content) == {"status": "shipped"}
    assert sum(len(e.pcm) for e in events if e.name == "audioOutput") == 3200
    assert srv.connections == srv.sessions == srv.turns == 1


async def test_caller_audio_ends_the_turn_after_the_endpointing_silence():
    stt = FakeSTT()
    async with local.nova_sonic(stt, FakeLLM(), FakeTTS(), AmplitudeVAD) as (srv, url):
        stream = await NovaSonic(url, endpointing="HIGH").open("Test.", (TOOL,))
        t = np.arange(320) / 16000
        tone = (8000 * np.sin(2 * np.pi * 220 * t)).astype(np.int16)
        for _ in range(30):            # 0.6 s of "speech"
            stream.send_audio(tone)
        for _ in range(40):            # 0.8 s of silence: HIGH ends the turn after 0.5 s
            stream.send_audio(np.zeros(320, np.int16))
        events = await _collect(stream, until="textOutput")
        await stream.close()
    user = events[-1]
    assert (user.role, user.stage, user.text) == ("USER", "FINAL", "Where is order 4217?")
    assert len(stt.seconds) == 1 and 0.6 <= stt.seconds[0] <= 1.2  # the utterance, with pre-roll and pause


async def test_protocol_errors_are_validation_exceptions():
    async with local.nova_sonic(FakeSTT(), FakeLLM(), FakeTTS(), AmplitudeVAD) as (srv, url):
        from websockets.asyncio.client import connect
        from websockets.exceptions import InvalidStatus

        path = f"{url}/model/amazon.nova-2-sonic-v1:0/invoke-with-bidirectional-stream"
        async with connect(path) as ws:
            await ws.send(json.dumps({"event": {"audioInput": {"promptName": "p", "contentName": "a", "content": ""}}}))
            reply = json.loads(await ws.recv())
        assert reply["exception"]["type"] == "validationException"
        assert "before sessionStart" in reply["exception"]["message"]
        with pytest.raises(InvalidStatus) as info:
            async with connect(f"{url}/wrong/path"):
                pass
        assert info.value.response.status_code == 404
        with pytest.raises(PortError, match="validationException: endpointingSensitivity"):
            stream = await NovaSonic(url).open("x")
            await stream.t.send({"event": {"sessionStart": {"turnDetectionConfiguration": {"endpointingSensitivity": "FAST"}}}})
            async for _ in stream.events():
                pass


async def test_one_real_speech_turn_end_to_end_with_the_embedded_models(tmp_path):
    """VAD + Whisper + SmolLM2 + Piper behind the protocol; the support agent's instructions and
    tools; boundaries stamped from the events; segments add up to V2V."""
    from rejoinder.adapters.registry import BUILDERS, StackConfig
    from rejoinder.cli import BUNDLED_CALL
    from rejoinder.runtime import load_caller
    from rejoinder.s2s import S2SRuntime

    sc = yaml.safe_load(BUNDLED_CALL.read_text())
    sc["turns"] = sc["turns"][:1]  # "Hello." (real speech, Asterisk prompt)
    sc["tail_ms"] = 1500
    path = tmp_path / "call.yaml"
    path.write_text(yaml.safe_dump(sc))
    cfg = StackConfig()
    stt, llm, tts = (BUILDERS["stt"]["whisper-base"](cfg), BUILDERS["llm"]["smollm2"](cfg),
                     BUILDERS["tts"]["piper"](cfg))
    async with local.nova_sonic(stt, llm, tts, lambda: BUILDERS["vad"]["silero"](cfg)) as (srv, url):
        rt = S2SRuntime(service=NovaSonic(url, endpointing="HIGH"))
        await srv.warmup()  # as the cascade's runtime warms up: models run once, the agent's prompt prefilled
        await srv.warm(rt.agent.instructions, tuple(t.schema for t in rt.agent.tools.values()))
        rt.no_reply_timeout_ms = 120000.0  # a loaded 2-core machine: wait for the reply however long
        turns, phone, scenario = await load_caller(path)
        res = await rt.call(turns, caller_phone=phone, tail_ms=scenario.tail_ms, out_dir=tmp_path)
    assert res.error is None
    [turn] = [r for r in res.turns if r.v2v_ms() is not None]
    assert "hello" in turn.transcript.lower()
    for b in ("user_speech_end", "eot_decided", "transcript_final", "llm_first_token", "tts_first_audio",
              "first_audio_out", "playback_start", "answer_start"):
        assert b in turn.stamps, b
    assert turn.turn_id == 1 and abs(sum(turn.segments().values()) - turn.v2v_ms()) < 0.01  # ms, rounded
    assert turn.time_to_answer_ms() == pytest.approx(turn.v2v_ms(), abs=25)
    assert turn.heard_text.strip() and res.transcript[0][0] == "caller"
    assert srv.turns == 1 and (tmp_path / "timeline.jsonl").exists()
