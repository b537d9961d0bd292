"""One conformance suite per port, parametrized over every adapter of that kind, on real models."""

from __future__ import annotations

import asyncio
import json
import time

import jiwer
import numpy as np
import pytest

from rejoinder.audio_io import resample, to_float32
from rejoinder.ports import (ChatMessage, LLMPort, LLMRequest, PortError, ServerTiming, STTPort,
                             ToolCall, TTSAudio, TTSPort, TurnPort, VADPort)
from tool_cases import SUPPORT, TOOLS, assert_valid_call

VADS = ["silero"]
TURNS = ["smart-turn"]
STTS = ["whisper-base", "cartesia"]
LLMS = ["smollm2", "openai"]
TTSS = ["piper", "espeak", "cartesia", "sagemaker"]
SERVED_TTS = ("cartesia", "sagemaker")  # adapters of a protocol, tested against our server (Piper)


@pytest.fixture(params=VADS)
def vad(request) -> VADPort:
    v = {"silero": "silero_vad"}[request.param]
    port = request.getfixturevalue(v)
    port.reset()
    return port


@pytest.fixture(params=TURNS)
def turn(request) -> TurnPort:
    return request.getfixturevalue({"smart-turn": "smart_turn"}[request.param])


@pytest.fixture(params=STTS)
async def stt(request):
    if request.param != "cartesia":
        yield request.getfixturevalue({"whisper-base": "whisper_stt"}[request.param])
        return
    from rejoinder.adapters.cartesia_stt import CartesiaSTT
    from rejoinder.hosting import local

    async with local.cartesia_stt(request.getfixturevalue("whisper_stt"), api_key="k") as (_, url):
        client = CartesiaSTT(url, "k")
        yield client
        await client.aclose()


@pytest.fixture(params=LLMS)
async def llm(request):
    if request.param == "smollm2":
        yield request.getfixturevalue("llama_llm")
        return
    from rejoinder.adapters.openai_llm import OpenAICompatLLM

    client = OpenAICompatLLM(request.getfixturevalue("llama_server"), "smollm2",
                             schema_format="json_object")
    yield client
    await client.aclose()


@pytest.fixture(params=TTSS)
async def tts(request, monkeypatch):
    if request.param not in SERVED_TTS:
        yield request.getfixturevalue({"piper": "piper_tts", "espeak": "espeak_tts"}[request.param])
        return
    from rejoinder.hosting import local

    engine = request.getfixturevalue("piper_tts")
    if request.param == "cartesia":
        from rejoinder.adapters.cartesia_tts import CartesiaTTS

        async with local.cartesia_tts(engine, api_key="k") as (_, url):
            client = CartesiaTTS(url, "k")
            yield client
            await client.aclose()
        return
    from rejoinder.adapters.sagemaker_tts import SageMakerTTS

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDLOCAL")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "local-secret")
    async with local.sagemaker_tts(engine, access_key="AKIDLOCAL", secret_key="local-secret") as (_, url):
        client = SageMakerTTS("rejoinder-tts", base_url=url)
        yield client
        await client.aclose()


# ---------------------------------------------------------------- VAD
def _windows(x: np.ndarray, n: int):
    for i in range(0, x.size - n + 1, n):
        yield x[i:i + n]


def test_vad_conformance(vad, asterisk):
    assert isinstance(vad, VADPort)
    assert vad.sample_rate == 16_000
    speech, _ = asterisk("conf-onlyperson")
    x = resample(speech, 16_000, vad.sample_rate)
    probs = np.array([vad.speech_prob(w) for w in _windows(x, vad.window_samples)])
    assert probs.max() > 0.8
    assert (probs > 0.5).mean() > 0.4, probs.round(2)

    vad.reset()
    silence = np.zeros(vad.sample_rate, np.float32)
    assert max(vad.speech_prob(w) for w in _windows(silence, vad.window_samples)) < 0.1

    vad.reset()
    noise = (np.random.default_rng(0).standard_normal(vad.sample_rate) * 3e-3).astype(np.float32)
    assert max(vad.speech_prob(w) for w in _windows(noise, vad.window_samples)) < 0.3

    for bad in (np.zeros(vad.window_samples - 1, np.float32), np.zeros((1, vad.window_samples))):
        with pytest.raises(ValueError, match=str(vad.window_samples)):
            vad.speech_prob(bad)


# ---------------------------------------------------------------- turn
COMPLETE = ["conf-onlyperson", "conf-getpin", "transfer", "privacy-unident", "agent-pass"]


async def test_turn_conformance(turn, asterisk):
    assert isinstance(turn, TurnPort)
    done, cut = [], []
    for name in COMPLETE:
        x, _ = asterisk(name)
        x = resample(x, 16_000, turn.sample_rate)
        pause = np.zeros(turn.sample_rate // 2, np.float32)
        done.append(await turn.completion_prob(np.concatenate([x, pause])))
        cut.append(await turn.completion_prob(x[: int(x.size * 0.5)]))
    for p in done + cut:
        assert isinstance(p, float) and 0.0 <= p <= 1.0
    assert np.mean(done) > np.mean(cut) + 0.2, (done, cut)
    # longer than the 8 s window and empty input are both accepted
    long = np.concatenate([asterisk(n)[0] for n in COMPLETE])
    assert 0.0 <= await turn.completion_prob(long) <= 1.0
    assert 0.0 <= await turn.completion_prob(np.zeros(0, np.float32)) <= 1.0


# ---------------------------------------------------------------- STT
STT_SET = ["hello", "auth-thankyou", "conf-getpin", "transfer", "agent-pass", "vm-nomore",
           "digits/4", "digits/7", "digits/9"]


async def _chunks(x: np.ndarray, n: int = 320):
    for i in range(0, x.size, n):
        yield x[i:i + n]
        await asyncio.sleep(0)


async def transcribe(stt: STTPort, x: np.ndarray) -> str:
    items = [t async for t in stt.stream(_chunks(x))]
    assert items and items[-1].final and all(not t.final for t in items[:-1])
    return items[-1].text


async def test_stt_conformance(stt, asterisk, norm):
    assert isinstance(stt, STTPort)
    refs, hyps = [], []
    for name in STT_SET:
        x, ref = asterisk(name)
        hyps.append(norm(await transcribe(stt, resample(x, 16_000, stt.sample_rate))))
        refs.append(norm(ref))
    wer = jiwer.wer(refs, hyps)
    assert wer <= 0.15, list(zip(refs, hyps))


# ---------------------------------------------------------------- LLM
ASK = (ChatMessage("system", "You are a concise assistant."),
       ChatMessage("user", "What is the capital of France?"))
SCHEMA = {"type": "object",
          "properties": {"intent": {"type": "string", "enum": ["order", "cancel", "other"]},
                         "quantity": {"type": "integer"}},
          "required": ["intent", "quantity"]}


async def said(stream) -> list:
    """The stream's text and calls; a :class:`ServerTiming` (what a server reported about its
    own work) may only come last."""
    out = [d async for d in stream]
    assert not any(isinstance(d, ServerTiming) for d in out[:-1]), out
    return [d for d in out if not isinstance(d, ServerTiming)]


async def test_llm_streams(llm):
    assert isinstance(llm, LLMPort) and llm.model_name
    deltas = await said(llm.stream(LLMRequest(messages=ASK, max_tokens=24)))
    assert deltas and all(isinstance(d, str) for d in deltas)
    assert "".join(deltas).strip()


async def test_llm_json_schema(llm):
    req = LLMRequest(messages=(ChatMessage("user", "I'd like to order two pizzas, please."),),
                     json_schema=SCHEMA, max_tokens=48, temperature=0.0)
    data = json.loads("".join(await said(llm.stream(req))))
    assert set(data) >= {"intent", "quantity"}
    assert data["intent"] in {"order", "cancel", "other"}
    assert isinstance(data["quantity"], int)


@pytest.mark.parametrize("with_tools", [False, True], ids=["text", "tools-auto"])
async def test_llm_cancellation(llm, with_tools):
    """Closing the stream (barge-in) stops generation: in-process, sampling ends within a token
    or two of the close (counted, not timed); through a server, the HTTP stream is dropped and
    the port serves the next request."""
    req = LLMRequest(messages=(ChatMessage("user", "Tell me a very long story about dragons."),),
                     max_tokens=400, temperature=0.0, tools=TOOLS if with_tools else ())
    gen = llm.stream(req)
    first = await gen.__anext__()
    assert isinstance(first, str)
    t0 = time.perf_counter()
    await gen.aclose()
    assert time.perf_counter() - t0 < 2.0  # closing never waits for the reply to finish
    lock = getattr(llm, "_lock", None)
    if lock is not None:  # in-process: the worker let go of the model; count what it sampled
        await asyncio.to_thread(lock.acquire)
        lock.release()
        assert llm.last_stats.generated <= 8, llm.last_stats
    out = await said(llm.stream(LLMRequest(messages=ASK, max_tokens=4)))
    assert out and all(isinstance(d, str) for d in out)


# ---------------------------------------------------------------- LLM tool calls
async def test_llm_tool_required_yields_a_valid_call(llm):
    req = LLMRequest((SUPPORT, ChatMessage("user", "Can you check order 4217?")), tools=TOOLS,
                     tool_choice="required", temperature=0.0, max_tokens=48)
    out = await said(llm.stream(req))
    calls = [d for d in out if isinstance(d, ToolCall)]
    assert len(calls) == 1, out
    assert_valid_call(calls[0])
    named = LLMRequest((SUPPORT, ChatMessage("user", "Move my haircut to Thursday at 3 pm.")),
                       tools=TOOLS, tool_choice="reschedule_appointment", temperature=0.0)
    calls = await said(llm.stream(named))
    assert [c.name for c in calls] == ["reschedule_appointment"]
    assert_valid_call(calls[0])


async def test_llm_tool_none_yields_text(llm):
    req = LLMRequest((SUPPORT, ChatMessage("user", "Can you check order 4217?")), tools=TOOLS,
                     tool_choice="none", temperature=0.0, max_tokens=32)
    out = await said(llm.stream(req))
    assert out and all(isinstance(d, str) for d in out)
    text = "".join(out)
    assert text.strip() and "<tool_call>" not in text


async def test_llm_continues_with_text_after_a_tool_result(llm):
    call = ToolCall("call_1", "lookup_order", {"order_id": "4217"})
    msgs = (SUPPORT, ChatMessage("user", "Can you check order 4217?"),
            ChatMessage("assistant", "", tool_calls=(call,)),
            ChatMessage("tool", json.dumps({"order_id": "4217", "status": "shipped",
                                            "eta": "Friday"}), tool_call_id="call_1"))
    req = LLMRequest(msgs, tools=TOOLS, tool_choice="auto", temperature=0.0, max_tokens=40)
    out = await said(llm.stream(req))
    assert out and all(isinstance(d, str) for d in out), out
    text = "".join(out)
    assert text.strip() and "<" not in text and "{" not in text, text


async def test_llm_unknown_tool_choice_is_port_error(llm):
    req = LLMRequest((SUPPORT, ChatMessage("user", "Hi.")), tools=TOOLS, tool_choice="rm_rf")
    with pytest.raises(PortError):
        await said(llm.stream(req))


# ---------------------------------------------------------------- TTS
SENTENCE = "Thank you for calling. Your large pizza will be ready soon."


async def test_tts_conformance(tts, whisper_stt, norm):
    assert isinstance(tts, TTSPort) and tts.voice_name
    assert tts.sample_rate > 0
    pieces = [p async for p in tts.stream(SENTENCE)]
    assert pieces and all(isinstance(p, TTSAudio) for p in pieces)
    pcm = np.concatenate([p.pcm for p in pieces])
    total_ms = pcm.size * 1000 / tts.sample_rate
    timed, offset = [], 0.0  # word times are relative to their piece's first sample
    for p in pieces:
        assert p.pcm.dtype == np.int16 and p.pcm.ndim == 1
        for word, start, end in p.words:
            assert word and 0 <= offset + start <= offset + end <= total_ms + 1
            timed.append((word, offset + start, offset + end))
        offset += p.pcm.size * 1000 / tts.sample_rate
    assert [a for _, a, _ in timed] == sorted(a for _, a, _ in timed)
    if getattr(tts, "word_timings", False) or type(tts).__name__ in ("CartesiaTTS", "SageMakerTTS"):
        assert [norm(w) for w, _, _ in timed] == norm(SENTENCE).split()  # every word, in order
    assert pcm.size / tts.sample_rate >= 0.3
    heard = whisper_stt.transcribe_sync(resample(to_float32(pcm), tts.sample_rate, 16_000))
    wer = jiwer.wer(norm(SENTENCE), norm(heard))
    assert wer <= 0.20, heard
    assert [p async for p in tts.stream("   ")] == []
