"""A TTS service failing mid-sentence, over a real socket, in the real session: the reply is
trimmed to the last whole word heard (from the service's word timestamps) and resumed."""

from __future__ import annotations

import pytest

import yaml

from rejoinder.runtime import load_caller
from rejoinder.cli import BUNDLED_CALL
from rejoinder.text import normalize_for_speech
from rejoinder.config import AgentConfig
from rejoinder.events import AgentSpeech, EventBus, Recovery
from rejoinder.runtime import Runtime
from rejoinder.hosting import local
from rejoinder.hosting.wire import ServerFaults


@pytest.fixture(scope="module")
def piper_tts():
    from rejoinder.adapters.piper_tts import PiperTTS

    return PiperTTS()


class EveryOther(ServerFaults):
    """The fault fires on every other request, so each retry succeeds (no backup voice)."""

    def draw(self):
        self.n = getattr(self, "n", 0) + 1
        if self.n % 2 == 0:
            return []
        self.fired += len(self.faults)
        return list(self.faults)


def _words(text: str) -> list[str]:
    text = normalize_for_speech(text)  # "4217" is spoken (and kept when trimmed) as digits
    return [w.strip(".,!?").lower() for w in text.split() if w.strip(".,!?")]


def _no_barge_in(tmp_path) -> str:
    """The bundled call without its last caller turn: nobody talks over the recovering reply."""
    sc = yaml.safe_load(BUNDLED_CALL.read_text())
    sc["turns"] = sc["turns"][:-1]
    sc["tail_ms"] = 15000  # the order's status is one long reply, and every other TTS request drops
    for turn in sc["turns"]:
        for seg in turn["audio"]:
            seg.pop("file", None)
    path = tmp_path / "call.yaml"
    path.write_text(yaml.safe_dump(sc))
    return path


@pytest.mark.parametrize("adapter", ["cartesia", "sagemaker"])
async def test_mid_stream_failure_resumes_from_the_last_word_heard(adapter, piper_tts, tmp_path, monkeypatch):
    cfg = AgentConfig()
    cfg.stack.tts = adapter
    # this test is about where the reply resumes, not about watchdog timing on a loaded machine
    cfg.recovery.tts_first_audio_ms = cfg.recovery.tts_stall_ms = 5000.0
    spec = "tts:drop@4" if adapter == "cartesia" else "tts:error@20"  # 400 ms into the audio
    faults = EveryOther(ServerFaults.parse(spec, "tts").faults)
    if adapter == "cartesia":
        server = local.cartesia_tts(piper_tts, faults=faults)
    else:
        monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDLOCAL")
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "local-secret")
        server = local.sagemaker_tts(piper_tts, access_key="AKIDLOCAL", secret_key="local-secret",
                                     faults=faults)
    async with server as (_, url):
        if adapter == "cartesia":
            cfg.stack.cartesia.base_url, cfg.stack.cartesia.api_key = url, "local-key"
        else:
            cfg.stack.sagemaker.base_url, cfg.stack.sagemaker.endpoint_name = url, "rejoinder-tts"
        agent = Runtime(cfg)
        turns, phone, sc = await load_caller(_no_barge_in(tmp_path))
        events: list = []
        bus = EventBus()
        bus.subscribe(events.append)
        result = await agent.call(turns, out_dir=tmp_path, caller_phone=phone, tail_ms=sc.tail_ms, bus=bus)
        await agent.models.tts.aclose()
    assert result.error is None and result.overlapping_audio == 0
    recovered = [e for e in events if isinstance(e, Recovery) and e.stage == "tts"]
    assert faults.fired >= 1 and recovered, (faults.fired, recovered)
    assert all(r.action == "retry" and r.resume_from for r in recovered)
    completed = 0
    for turn in {r.turn_id for r in recovered}:
        [speech] = [e for e in events if isinstance(e, AgentSpeech) and e.turn_id == turn]
        heard, full = _words(speech.heard_text), _words(speech.full_text)
        if speech.interrupted:  # the caller barged in (e.g. over the greeting): a prefix, no repeats
            assert heard == full[:len(heard)], speech
            continue
        # every word of the reply heard exactly once: trimmed to the last whole word, resumed
        assert heard == full, speech
        completed += 1
    assert completed >= 1
    for r in recovered:  # each resume starts at a word boundary of a chunk the agent was saying
        said = " ".join(e.full_text for e in events if isinstance(e, AgentSpeech) and e.turn_id == r.turn_id)
        assert " ".join(_words(said)).find(" ".join(_words(r.resume_from))) >= 0, (r, said)
