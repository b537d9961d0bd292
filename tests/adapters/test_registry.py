"""Stack configuration, lazy building, and model provenance."""

from __future__ import annotations

import sys

import pytest
from pydantic import ValidationError

from rejoinder.adapters.registry import StackConfig, build_stack, describe_models, file_sha256
from rejoinder.errors import ConfigError, MissingExtra


def test_defaults_and_extra_forbid():
    cfg = StackConfig()
    assert (cfg.vad, cfg.turn, cfg.stt, cfg.llm, cfg.tts) == (
        "silero", "smart-turn", "whisper-base", "smollm2", "piper")
    with pytest.raises(ValidationError):
        StackConfig(vda="silero")
    with pytest.raises(ValidationError):
        StackConfig(whisper={"beam": 5})


@pytest.mark.parametrize("field,valid", [("vad", "silero"), ("stt", "whisper-base"),
                                         ("llm", "openai, smollm2"), ("tts", "espeak, piper")])
def test_unknown_name_lists_valid_ones(field, valid):
    with pytest.raises(ConfigError, match=valid):
        build_stack(StackConfig(**{field: "nope"}))


def test_missing_piper_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "piper", None)  # import piper -> ImportError
    monkeypatch.delitem(sys.modules, "rejoinder.adapters.piper_tts", raising=False)
    from rejoinder.adapters.registry import BUILDERS

    with pytest.raises(MissingExtra, match=r"pip install 'rejoinder\[piper\]'"):
        BUILDERS["tts"]["piper"](StackConfig())


def test_build_stack_espeak_openai():
    cfg = StackConfig(tts="espeak", llm="openai",
                      openai={"base_url": "http://127.0.0.1:9/v1", "model": "m"})
    stack = build_stack(cfg)
    assert stack.tts.sample_rate == 22_050 and stack.llm.model_name == "m"
    assert stack.vad.window_samples == 512 and stack.stt.sample_rate == 16_000


def test_describe_models():
    d = describe_models(StackConfig(tts="espeak"))
    assert set(d) == {"vad", "turn", "stt", "llm", "tts"}
    for kind in ("vad", "turn", "stt", "llm"):
        # the LLM's GGUF, then the tool chooser's MiniLM model and tokenizer
        files = d[kind]["files"]
        assert len(files) == (3 if kind == "llm" else 1)
        for f in files:
            assert len(f["sha256"]) == 64 and f["bytes"] > 0
            assert file_sha256(f["path"]) == f["sha256"]
    assert d["llm"]["sha256"] == d["llm"]["files"][0]["sha256"] and d["llm"]["embedder"] == "minilm"
    assert d["llm"]["tool_which"] == "examples"
    assert d["tts"]["files"] == [] and d["tts"]["license"] == "GPL-3.0"
