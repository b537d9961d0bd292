import rejoinder


def test_public_names_are_exported_and_resolve():
    for name in rejoinder.__all__:
        assert getattr(rejoinder, name) is not None, name
    assert rejoinder.__version__ == "0.1.0"
    assert set(rejoinder.SEGMENTS) == {"endpointing", "transcription", "tool_choice", "tools", "llm_ttft",
                                       "first_text", "tts_ttfb", "audio_out", "playout",
                                       "lead_silence"}
