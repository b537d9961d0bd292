"""Shared fixtures for the adapter tests: real models, loaded once per session; real speech
(Asterisk prompts, 8 kHz human recordings) with their published transcripts."""

from __future__ import annotations

import gzip
import re
from pathlib import Path

import numpy as np
import pytest

SOUNDS = Path("/usr/share/asterisk/sounds/en")
TRANSCRIPTS = Path("/usr/share/doc/asterisk-core-sounds-en/core-sounds-en.txt.gz")


def _transcripts() -> dict[str, str]:
    out = {}
    with gzip.open(TRANSCRIPTS, "rt", encoding="utf-8", errors="replace") as f:
        for line in f:
            m = re.match(r"^([\w/-]+):\s*(.*)$", line.strip())
            if m:
                out[m.group(1)] = m.group(2)
    return out


@pytest.fixture(scope="session")
def asterisk():
    """``asterisk(name) -> (float32 16 kHz audio, transcript)`` for an Asterisk prompt."""
    if not SOUNDS.is_dir() or not TRANSCRIPTS.is_file():
        pytest.fail("the Asterisk sound prompts are missing: install the Debian packages "
                    "asterisk-core-sounds-en and asterisk-core-sounds-en-wav (scripts/setup.sh does)")
    from rejoinder.audio_io import load_audio, resample

    texts = _transcripts()
    cache: dict[str, tuple[np.ndarray, str]] = {}

    def get(name: str) -> tuple[np.ndarray, str]:
        if name not in cache:
            x, sr = load_audio(SOUNDS / f"{name}.wav")
            cache[name] = (resample(x, sr, 16_000), texts[name])
        return cache[name]

    return get


def normalize_text(s: str) -> str:
    """Lower case, digits spelled out, punctuation and bracketed notes removed."""
    from num2words import num2words

    s = re.sub(r"\(.*?\)|\[.*?\]", " ", s.lower())
    s = re.sub(r"\d+", lambda m: " " + num2words(int(m.group())) + " ", s)
    s = re.sub(r"[^a-z' ]", " ", s.replace("-", " "))
    return " ".join(s.split())


@pytest.fixture(scope="session")
def norm():
    """The text normaliser used before computing WER."""
    return normalize_text


@pytest.fixture(scope="session")
def silero_vad():
    from rejoinder.adapters.silero_vad import SileroVAD

    return SileroVAD()


@pytest.fixture(scope="session")
def smart_turn():
    from rejoinder.adapters.smart_turn import SmartTurnV3

    return SmartTurnV3()


@pytest.fixture(scope="session")
def whisper_stt():
    from rejoinder.adapters.whisper_stt import WhisperSTT

    return WhisperSTT()


@pytest.fixture(scope="session")
def llama_llm():
    from rejoinder.adapters.llama_llm import LlamaLLM

    return LlamaLLM(tool_mode="lazy")  # the gate has its own tests (test_tool_gate.py)


@pytest.fixture(scope="session")
def piper_tts():
    pytest.importorskip("piper", reason="optional extra rejoinder[piper] not installed")
    from rejoinder.adapters.piper_tts import PiperTTS

    return PiperTTS()


@pytest.fixture(scope="session")
def espeak_tts():
    from rejoinder.adapters.espeak_tts import EspeakTTS

    return EspeakTTS()


@pytest.fixture(scope="session")
def llama_server(tmp_path_factory):
    """llama-cpp-python's OpenAI-compatible server on loopback serving SmolLM2 with the
    ``rejoinder-tools`` chat format (rejoinder.adapters.llama_server); yields base_url."""
    for mod in ("sse_starlette", "starlette_context", "pydantic_settings", "uvicorn"):
        pytest.importorskip(mod, reason="llama_cpp.server needs sse-starlette, starlette-context, "
                                        "pydantic-settings")
    from rejoinder.adapters import llama_server as ls

    log = tmp_path_factory.mktemp("llama_server") / "server.log"
    server = ls.start(n_ctx=4096, log_path=log)
    try:
        yield server.base_url
    finally:
        server.stop()
