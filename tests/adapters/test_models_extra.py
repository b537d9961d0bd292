"""Adapter-specific behaviour beyond the shared conformance suite."""

from __future__ import annotations

import asyncio
import statistics
import time

import numpy as np
import pytest

from rejoinder.ports import ChatMessage, LLMRequest, PortError


# ---------------------------------------------------------------- Silero VAD
def test_vad_reset_makes_runs_reproducible(silero_vad, asterisk):
    x, _ = asterisk("hello")
    wins = [x[i:i + 512] for i in range(0, x.size - 511, 512)]
    silero_vad.reset()
    a = [silero_vad.speech_prob(w) for w in wins]
    b = [silero_vad.speech_prob(w) for w in wins]  # state carried: differs from a fresh run
    silero_vad.reset()
    c = [silero_vad.speech_prob(w) for w in wins]
    assert a == c and a != b


# ---------------------------------------------------------------- Whisper
def test_prepare_whisper_model_is_idempotent_and_repairs(tmp_path, monkeypatch):
    from rejoinder.adapters.whisper_stt import _part_paths, prepare_whisper_model

    monkeypatch.setenv("REJOINDER_CACHE", str(tmp_path))
    folder = prepare_whisper_model()
    assert folder == tmp_path / "whisper-base"
    _, p1, p2 = _part_paths()
    model = folder / "model.bin"
    assert model.stat().st_size == p1.stat().st_size + p2.stat().st_size
    for name in ("config.json", "tokenizer.json", "vocabulary.txt"):
        assert (folder / name).is_file()
    mtime = model.stat().st_mtime_ns
    assert prepare_whisper_model() == folder and model.stat().st_mtime_ns == mtime  # kept
    with open(model, "r+b") as f:  # simulate an interrupted copy
        f.truncate(1000)
    prepare_whisper_model()
    assert model.stat().st_size == p1.stat().st_size + p2.stat().st_size
    assert not list(folder.glob("*.tmp"))


def test_loop_detector():
    from rejoinder.adapters.whisper_stt import _looks_looped

    assert _looks_looped("8 8 8 8 8 8 8 8 8 8")
    assert _looks_looped("Press 1 to enter an extension. Press 2 to use the directory. "
                         "Press 1 to enter an extension.")
    assert not _looks_looped("Press 1 to enter an extension, press 2 to use the directory.")
    assert not _looks_looped("Thank you.")


def test_whisper_short_window_matches_standard(whisper_stt, asterisk, norm):
    for name in ("conf-getpin", "digits/7"):
        x, ref = asterisk(name)
        short = whisper_stt.transcribe_sync(x, short_window=True)
        full = whisper_stt.transcribe_sync(x, short_window=False)
        assert norm(short) == norm(ref), short
        assert norm(full) == norm(ref), full


def test_whisper_empty_and_hotwords(asterisk, norm):
    from rejoinder.adapters.whisper_stt import WhisperSTT

    stt = WhisperSTT(hotwords="zero one two three four five six seven eight nine",
                     initial_prompt="Caller reads digits.")
    assert stt.transcribe_sync(np.zeros(0, np.float32)) == ""
    # with hotwords, sentences still come out right; a lone digit may come out doubled ("four
    # four" on some CPUs), which is why the embedded stack uses an initial prompt, not hotwords
    for name in ("vm-enter-num-to-call", "conf-getpin"):
        x, ref = asterisk(name)
        assert norm(stt.transcribe_sync(x)) == norm(ref)


def test_whisper_beam_search(asterisk, norm):
    from rejoinder.adapters.registry import WhisperOptions
    from rejoinder.adapters.whisper_stt import WhisperSTT

    stt = WhisperSTT(beam_size=4, initial_prompt="Caller reads digits.")
    for name in ("vm-enter-num-to-call", "digits/7"):  # both decode paths, with a beam
        x, ref = asterisk(name)
        assert norm(stt.transcribe_sync(x, short_window=True)) == norm(ref)
        assert norm(stt.transcribe_sync(x, short_window=False)) == norm(ref)
    with pytest.raises(ValueError, match="beam_size must be at least 1"):
        WhisperSTT(beam_size=0)
    assert WhisperOptions().beam_size == 1
    with pytest.raises(ValueError):
        WhisperOptions(beam_size=0)


# ---------------------------------------------------------------- llama.cpp
def test_chatml_prompt():
    from rejoinder.adapters.llama_llm import DEFAULT_SYSTEM, chatml_prompt

    p = chatml_prompt([ChatMessage("user", "hi")], prefix='{"a":')
    assert p == (f"<|im_start|>system\n{DEFAULT_SYSTEM}<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n"
                 '<|im_start|>assistant\n{"a":')


async def _ttft(llm, req) -> float:
    t0 = time.perf_counter()
    gen = llm.stream(req)
    await gen.__anext__()
    dt = time.perf_counter() - t0
    await gen.aclose()
    return dt


async def test_llama_kv_prefix_reuse(llama_llm):
    """A second request sharing a long system prompt only prefills its new tokens."""
    base = ("You are the phone agent of Tony's Pizza on Main Street. Menu: margherita, pepperoni, "
            "four cheese, veggie, hawaiian; sizes small, medium, large; drinks cola and water. ") * 4
    first, second = [], []
    for i in range(3):
        system = f"Session {i}. {base}"  # a new prefix each round: nothing cached
        ask = lambda q: LLMRequest(messages=(ChatMessage("system", system), ChatMessage("user", q)),
                                   max_tokens=1)
        first.append(await _ttft(llama_llm, ask("Do you deliver?")))
        second.append(await _ttft(llama_llm, ask("What sizes are there?")))
    f, s = statistics.median(first), statistics.median(second)
    print(f"prefix reuse: first {f * 1000:.0f} ms, second {s * 1000:.0f} ms, ratio {s / f:.2f}")
    assert s < f


async def test_llama_warmup_and_prefix(llama_llm):
    system = "You take pizza orders. Answer in one short sentence."
    n = await asyncio.to_thread(llama_llm.warmup, system)
    assert n > 5
    req = LLMRequest(messages=(ChatMessage("system", system), ChatMessage("user", "Hi!")),
                     prefix="Hello", max_tokens=8, temperature=0.0)
    out = "".join([d async for d in llama_llm.stream(req)])
    assert out and not out.startswith("Hello")


async def test_llama_bad_schema_is_port_error(llama_llm):
    req = LLMRequest(messages=(ChatMessage("user", "x"),), json_schema={"type": "no-such-type"})
    with pytest.raises(PortError):
        [d async for d in llama_llm.stream(req)]


# ---------------------------------------------------------------- OpenAI-compatible
async def test_openai_http_error_is_port_error(llama_server):
    from rejoinder.adapters.openai_llm import OpenAICompatLLM

    llm = OpenAICompatLLM(llama_server.removesuffix("/v1") + "/nope", "smollm2")
    with pytest.raises(PortError, match="404"):
        [d async for d in llm.stream(LLMRequest(messages=(ChatMessage("user", "hi"),)))]
    await llm.aclose()
    dead = OpenAICompatLLM("http://127.0.0.1:9", "x")
    with pytest.raises(PortError, match="Connect"):
        [d async for d in dead.stream(LLMRequest(messages=(ChatMessage("user", "hi"),)))]
    await dead.aclose()


def test_openai_config_from_env(monkeypatch):
    from rejoinder.adapters.openai_llm import OpenAICompatLLM
    from rejoinder.errors import ConfigError

    for var in ("REJOINDER_LLM_BASE_URL", "REJOINDER_LLM_MODEL", "REJOINDER_LLM_API_KEY",
                "OPENAI_API_KEY"):
        monkeypatch.delenv(var, raising=False)
    with pytest.raises(ConfigError, match="REJOINDER_LLM_BASE_URL"):
        OpenAICompatLLM()
    monkeypatch.setenv("REJOINDER_LLM_BASE_URL", "http://h:1/v1/")
    monkeypatch.setenv("REJOINDER_LLM_MODEL", "m")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-x")
    llm = OpenAICompatLLM()
    assert llm.base_url == "http://h:1/v1" and llm.model_name == "m"
    assert llm._headers["Authorization"] == "Bearer sk-x"
    body = llm.payload(LLMRequest(messages=(ChatMessage("user", "hi"),), prefix="Sure",
                                  json_schema={"type": "object"}, stop=("\n",)))
    assert body["stream"] is True and body["messages"][-1] == {"role": "assistant",
                                                               "content": "Sure"}
    assert body["response_format"]["type"] == "json_schema" and body["stop"] == ["\n"]


# ---------------------------------------------------------------- espeak
async def test_espeak_word_timings(espeak_tts):
    text = "Please hold while I check your order."
    (piece,) = [p async for p in espeak_tts.stream(text)]
    words = [w for w, _, _ in piece.words]
    assert words == ["Please", "hold", "while", "I", "check", "your", "order"]
    starts = [s for _, s, _ in piece.words]
    assert starts == sorted(starts) and starts[-1] > 500
    slow = type(espeak_tts)(rate=100).synthesize_sync(text)
    assert slow.pcm.size > piece.pcm.size * 1.3
