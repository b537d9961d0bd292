"""SageMaker bidirectional streaming: the container contract (WebSocket at
/invocations-bidirectional-stream, /ping, text and binary frames both ways) served by the local
endpoint over the embedded models, the adapters, and a TTS connection dying after the first
audio in a real call — resumed from the last word heard."""

from __future__ import annotations

import json

import numpy as np
import pytest
import yaml

from rejoinder.adapters.sagemaker_bidi import SageMakerBidiSTT, SageMakerBidiTTS
from rejoinder.errors import ConfigError
from rejoinder.hosting import local
from rejoinder.hosting.sagemaker_bidi_server import PATH
from rejoinder.hosting.wire import ServerFaults
from rejoinder.ports import PortError


@pytest.fixture(scope="module")
def piper_tts():
    from rejoinder.adapters.piper_tts import PiperTTS

    return PiperTTS()


@pytest.fixture(scope="module")
def whisper():
    from rejoinder.adapters.registry import BUILDERS, StackConfig

    return BUILDERS["stt"]["whisper-base"](StackConfig())


async def test_container_contract_ping_path_and_frames(piper_tts):
    import httpx
    from websockets.asyncio.client import connect
    from websockets.exceptions import InvalidStatus

    async with local.sagemaker_bidi("tts", piper_tts) as (srv, url):
        http = url.replace("ws://", "http://")
        async with httpx.AsyncClient() as client:
            assert (await client.get(f"{http}/ping")).status_code == 200
        with pytest.raises(InvalidStatus) as info:
            async with connect(f"{url}/invocations"):
                pass
        assert info.value.response.status_code == 404
        with pytest.raises(InvalidStatus) as info:
            async with connect(f"{url}{PATH}?model=stt"):
                pass
        assert info.value.response.status_code == 400
        async with connect(f"{url}{PATH}") as ws:
            await ws.send(json.dumps({"type": "speak", "text": "Your order has shipped.", "sample_rate": 16000}))
            frames = []
            while True:
                f = await ws.recv()
                frames.append(f)
                if isinstance(f, str) and json.loads(f)["type"] == "done":
                    break
            await ws.send(b"\x00\x01")  # binary from the client is not a TTS command
            assert json.loads(await ws.recv())["type"] == "error"
    audio = [f for f in frames if isinstance(f, bytes)]
    texts = [json.loads(f) for f in frames if isinstance(f, str)]
    assert audio and all(len(a) % 2 == 0 for a in audio)  # binary frames: int16 PCM
    first_audio = next(i for i, f in enumerate(frames) if isinstance(f, bytes))
    stamps = [i for i, f in enumerate(frames) if isinstance(f, str) and json.loads(f)["type"] == "timestamps"]
    assert stamps and stamps[0] < first_audio  # word timings travel ahead of their audio
    words = [w for t in texts if t["type"] == "timestamps" for w in t["word_timestamps"]["words"]]
    assert [w.strip(".").lower() for w in words] == ["your", "order", "has", "shipped"]
    assert srv.connections == 1 and srv.utterances == 1  # refused upgrades are not accepted connections


async def test_adapters_stream_many_utterances_over_one_connection(piper_tts, whisper):
    from rejoinder.audio_io import resample

    async with local.sagemaker_bidi("tts", piper_tts) as (tsrv, turl), \
            local.sagemaker_bidi("stt", whisper) as (ssrv, surl):
        tts, stt = SageMakerBidiTTS(turl), SageMakerBidiSTT(surl)
        await tts.connect()
        pcm = []
        for text in ("Hello.", "Your order four two one seven has shipped."):
            pieces = [p async for p in tts.stream(text)]
            assert any(len(p.pcm) for p in pieces)
            pcm = [p.pcm for p in pieces]
        assert tts.pool.opened == 1 and tsrv.connections == 1 and tsrv.utterances == 2
        x = np.concatenate(pcm).astype(np.float32) / 32768.0
        x = resample(x, tts.sample_rate, 16000)

        async def audio():
            for i in range(0, len(x), 320):  # 20 ms frames, as the session streams them
                yield x[i:i + 320]

        [tr] = [t async for t in stt.stream(audio())]
        [again] = [t async for t in stt.stream(audio())]
        assert tr.final and "order" in tr.text.lower() and again.text == tr.text  # Piper varies; Whisper does not
        assert stt.pool.opened == 1 and ssrv.connections == 1 and ssrv.utterances == 2
        await tts.aclose()
        await stt.aclose()


async def test_a_dropped_connection_mid_utterance_is_a_port_error(piper_tts):
    faults = ServerFaults.parse("tts:drop@3", "tts")
    async with local.sagemaker_bidi("tts", piper_tts, faults=faults) as (srv, url):
        tts = SageMakerBidiTTS(url)
        got = []
        with pytest.raises(PortError, match="died mid-stream"):
            async for p in tts.stream("Your order has shipped and will arrive tomorrow."):
                got.append(p)
        assert sum(len(p.pcm) for p in got) > 0  # it failed after the first audio
        assert any(p.words for p in got)          # with the words' timings already known
        await tts.aclose()


def test_no_url_or_endpoint_is_a_config_error():
    with pytest.raises(ConfigError, match="stack.sagemaker_bidi.tts_url"):
        SageMakerBidiTTS()
    with pytest.raises(ConfigError, match="ws:// or wss://"):
        SageMakerBidiSTT("http://127.0.0.1:1")


class EveryOther(ServerFaults):
    """The fault fires on every other request, so each retry succeeds."""

    def draw(self):
        self.n = getattr(self, "n", 0) + 1
        if self.n % 2 == 0:
            return []
        self.fired += len(self.faults)
        return list(self.faults)


async def test_mid_stream_failure_in_a_real_call_resumes_from_the_last_word_heard(piper_tts, tmp_path):
    from rejoinder.cli import BUNDLED_CALL
    from rejoinder.config import AgentConfig
    from rejoinder.events import AgentSpeech, EventBus, Recovery
    from rejoinder.runtime import Runtime, load_caller
    from rejoinder.text import normalize_for_speech

    def words(text):
        return [w.strip(".,!?").lower() for w in normalize_for_speech(text).split() if w.strip(".,!?")]

    sc = yaml.safe_load(BUNDLED_CALL.read_text())
    sc["turns"], sc["tail_ms"] = sc["turns"][:-1], 6000  # without the last turn: nobody talks over a reply
    path = tmp_path / "call.yaml"
    path.write_text(yaml.safe_dump(sc))
    cfg = AgentConfig()
    cfg.recovery.tts_first_audio_ms = cfg.recovery.tts_stall_ms = 5000.0  # about resuming, not watchdogs
    faults = EveryOther(ServerFaults.parse("tts:drop@10", "tts").faults)  # 400 ms into the audio
    async with local.sagemaker_bidi("tts", piper_tts, faults=faults) as (srv, url):
        cfg.stack.tts, cfg.stack.sagemaker_bidi.tts_url = "sagemaker-bidi", url
        agent = Runtime(cfg)
        turns, phone, s = await load_caller(path)
        events: list = []
        bus = EventBus()
        bus.subscribe(events.append)
        result = await agent.call(turns, caller_phone=phone, tail_ms=s.tail_ms, bus=bus)
        await agent.models.tts.aclose()
    assert result.error is None and result.overlapping_audio == 0
    recovered = [e for e in events if isinstance(e, Recovery) and e.stage == "tts"]
    assert faults.fired >= 1 and recovered and all(r.action == "retry" and r.resume_from for r in recovered)
    completed = 0
    for e in events:
        if not isinstance(e, AgentSpeech) or e.turn_id not in {r.turn_id for r in recovered}:
            continue
        heard, full = words(e.heard_text), words(e.full_text)
        if e.interrupted:  # the caller spoke over it (e.g. the greeting): a prefix, no repeats
            assert heard == full[:len(heard)], e
        else:  # trimmed to the last whole word, resumed: every word heard exactly once
            assert heard == full, e
            completed += 1
    assert completed >= 1
    assert srv.connections >= 2  # the broken connection was replaced
