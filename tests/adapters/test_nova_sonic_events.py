"""Nova Sonic's event protocol: what the adapter sends and how it reads the service's events,
against the shapes documented in shared PROTOCOLS.md §4.3–4.4 (AWS Nova Sonic input/output events)."""

from __future__ import annotations

import base64
import json

import numpy as np
import pytest

from rejoinder.adapters import nova_sonic_events as ev
from rejoinder.adapters.nova_sonic import NovaSonic
from rejoinder.ports import PortError, ToolSchema

TOOL = ToolSchema("lookup_order", "Look up an order.",
                  {"type": "object", "properties": {"order_id": {"type": "string"}}, "required": ["order_id"]})


def test_session_opens_with_the_documented_events_in_order():
    svc = NovaSonic("ws://127.0.0.1:1", endpointing="HIGH")
    events = svc.setup_events("p1", "a1", "You are a test agent.", (TOOL,), max_tokens=60, temperature=0.0)
    names = [ev.event_name(e)[0] for e in events]
    assert names == ["sessionStart", "promptStart", "contentStart", "textInput", "contentEnd", "contentStart"]
    start = events[0]["event"]["sessionStart"]
    assert start == {"inferenceConfiguration": {"maxTokens": 60, "topP": 0.9, "temperature": 0.0},
                     "turnDetectionConfiguration": {"endpointingSensitivity": "HIGH"}}
    prompt = events[1]["event"]["promptStart"]
    assert prompt["promptName"] == "p1"
    assert prompt["textOutputConfiguration"] == {"mediaType": "text/plain"}
    assert prompt["audioOutputConfiguration"] == {
        "mediaType": "audio/lpcm", "sampleRateHertz": 16000, "sampleSizeBits": 16, "channelCount": 1,
        "voiceId": "matthew", "encoding": "base64", "audioType": "SPEECH"}
    assert prompt["toolUseOutputConfiguration"] == {"mediaType": "application/json"}
    [spec] = prompt["toolConfiguration"]["tools"]
    assert spec["toolSpec"]["name"] == "lookup_order"
    assert isinstance(spec["toolSpec"]["inputSchema"]["json"], str)  # a JSON Schema *string*
    assert json.loads(spec["toolSpec"]["inputSchema"]["json"]) == TOOL.parameters
    system = events[2]["event"]["contentStart"]
    assert system["type"] == "TEXT" and system["role"] == "SYSTEM" and system["interactive"] is False
    assert system["textInputConfiguration"] == {"mediaType": "text/plain"}
    text = events[3]["event"]["textInput"]
    assert text["content"] == "You are a test agent." and text["contentName"] == system["contentName"]
    assert events[4]["event"]["contentEnd"] == {"promptName": "p1", "contentName": system["contentName"]}
    audio = events[5]["event"]["contentStart"]
    assert audio["type"] == "AUDIO" and audio["role"] == "USER" and audio["interactive"] is True
    assert audio["contentName"] == "a1"
    assert audio["audioInputConfiguration"] == {
        "mediaType": "audio/lpcm", "sampleRateHertz": 16000, "sampleSizeBits": 16, "channelCount": 1,
        "encoding": "base64", "audioType": "SPEECH"}
    assert all(next(iter(e["event"].values())).get("promptName") == "p1" for e in events[1:])


def test_audio_input_is_base64_of_little_endian_int16():
    pcm = np.array([0, 1, -1, 32767, -32768], dtype=np.int16)
    e = ev.audio_input("p", "a", pcm)["event"]["audioInput"]
    assert e["promptName"] == "p" and e["contentName"] == "a"
    assert base64.b64decode(e["content"]) == b"\x00\x00\x01\x00\xff\xff\xff\x7f\x00\x80"


def test_tool_result_is_a_tool_content_block_naming_the_tool_use():
    start, result, end = ev.tool_result("p", "use-7", '{"status": "shipped"}')
    s = start["event"]["contentStart"]
    assert s["type"] == "TOOL" and s["role"] == "TOOL" and s["interactive"] is False
    assert s["toolResultInputConfiguration"] == {"toolUseId": "use-7", "type": "TEXT",
                                                 "textInputConfiguration": {"mediaType": "text/plain"}}
    assert result["event"]["toolResult"] == {"promptName": "p", "contentName": s["contentName"],
                                             "content": '{"status": "shipped"}'}
    assert end["event"]["contentEnd"]["contentName"] == s["contentName"]


def _out(name, **body):
    return json.dumps({"event": {name: {"sessionId": "s", "promptName": "p", "completionId": "c", **body}}})


def test_output_events_carry_role_and_generation_stage_from_their_content_start():
    p = ev.OutputParser()
    start = p.parse(_out("contentStart", contentId="t1", type="TEXT", role="ASSISTANT",
                         additionalModelFields='{"generationStage":"SPECULATIVE"}'))
    assert (start.role, start.kind, start.stage) == ("ASSISTANT", "TEXT", "SPECULATIVE")
    text = p.parse(_out("textOutput", contentId="t1", content="Your order shipped."))
    assert (text.role, text.stage, text.text) == ("ASSISTANT", "SPECULATIVE", "Your order shipped.")
    end = p.parse(_out("contentEnd", contentId="t1", type="TEXT", stopReason="PARTIAL_TURN"))
    assert end.role == "ASSISTANT" and end.body["stopReason"] == "PARTIAL_TURN"
    p.parse(_out("contentStart", contentId="u1", type="TEXT", role="USER",
                 additionalModelFields='{"generationStage":"FINAL"}'))
    user = p.parse(_out("textOutput", contentId="u1", content="order 4217"))
    assert (user.role, user.stage) == ("USER", "FINAL")
    p.parse(_out("contentStart", contentId="a1", type="AUDIO", role="ASSISTANT"))
    pcm = np.array([5, -5, 300], dtype=np.int16)
    audio = p.parse(_out("audioOutput", contentId="a1", content=base64.b64encode(pcm.tobytes()).decode()))
    assert audio.kind == "AUDIO" and audio.pcm.dtype == np.int16 and list(audio.pcm) == [5, -5, 300]
    use = p.parse(_out("toolUse", contentId="x", toolName="lookup_order", toolUseId="u-1",
                       content='{"order_id": "4217"}'))
    assert use.arguments == {"order_id": "4217"} and use.body["toolUseId"] == "u-1"
    barge = p.parse(_out("textOutput", contentId="t9", content=ev.BARGE_IN))
    assert barge.interrupted and not text.interrupted


@pytest.mark.parametrize("raw, problem", [
    ("{not json", "malformed JSON"),
    (json.dumps({"event": {"fooOutput": {}}}), "unknown Nova Sonic output event 'fooOutput'"),
    (json.dumps({"foo": 1}), "not a Nova Sonic event"),
    (_out("audioOutput", contentId="a", content="@@@"), "invalid base64"),
    (_out("audioOutput", contentId="a", content=base64.b64encode(b"abc").decode()), "whole int16"),
    (_out("toolUse", contentId="x", toolName="t", toolUseId="u", content="[1"), "not JSON"),
])
def test_malformed_output_events_raise_port_errors_naming_the_problem(raw, problem):
    with pytest.raises(PortError, match=problem.replace("(", r"\(")):
        ev.OutputParser().parse(raw)


def test_bad_settings_are_config_errors():
    from rejoinder.errors import ConfigError

    with pytest.raises(ConfigError, match="HIGH, MEDIUM, LOW"):
        NovaSonic("ws://x", endpointing="FAST")
    with pytest.raises(ConfigError, match="8000, 16000 or 24000"):
        NovaSonic("ws://x", output_rate=44100)
    with pytest.raises(ConfigError, match="ws:// or wss://"):
        NovaSonic("http://x").transport()
