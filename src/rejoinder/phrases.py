"""The runtime's own fixed phrases, rendered once by the call's TTS at warm-up.

A filler ("One moment.") and the hold phrases after it (:class:`rejoinder.reply.FillerPolicy`)
are words the runtime says on its own, always the same, at the moment the caller is waiting
longest: a tool round has just been decided. Synthesizing them then costs a TTS request (Piper
took 100-350 ms to a short phrase's first audio on a busy 2-core box) on CPU that the LLM
writing the tool call needs too. :func:`render_phrases` synthesizes each phrase with the call's
TTS voice ahead of time; :class:`RenderedPhrases` replays that audio as a TTS port, so the reply
speaks it through the same path (stamps ``tts_request`` / ``tts_first_audio`` / ``tts_end`` with
the voice named ``"<voice> (pre-rendered)"``, word timings, what the caller heard). Only the
runtime's marked phrases (``source="filler"``) are ever replayed; the LLM's words are always
synthesized when written.
"""

from __future__ import annotations

from typing import AsyncIterator, Iterable

from .ports import TTSAudio, TTSPort
from .text import normalize_for_speech


def phrase_key(text: str) -> str:
    """The key a phrase is rendered and looked up under: its spoken words, single-spaced (what
    the reply sends to TTS for a chunk that holds only the phrase)."""
    return " ".join(normalize_for_speech(text).split())


class RenderedPhrases:
    """A TTS port that replays phrases synthesized ahead of time, piece by piece as the TTS gave
    them (int16 mono at ``sample_rate``, Hz, with the engine's word timings).

    Raises:
        KeyError: :meth:`stream` of a phrase that was not rendered (check ``text in phrases``).
    """

    def __init__(self, audio: dict[str, list[TTSAudio]], sample_rate: int, voice_name: str) -> None:
        self.audio = audio
        self.sample_rate = sample_rate
        self.voice_name = f"{voice_name} (pre-rendered)"

    def __contains__(self, text: object) -> bool:
        return isinstance(text, str) and text in self.audio

    def __len__(self) -> int:
        return len(self.audio)

    async def stream(self, text: str) -> AsyncIterator[TTSAudio]:
        for piece in self.audio[text]:
            yield piece


async def render_phrases(tts: TTSPort, phrases: Iterable[str]) -> RenderedPhrases:
    """Synthesize each distinct phrase once with ``tts`` (at its own rate; the reply resamples
    to the line like any TTS audio). A phrase whose synthesis gives no audio is left out, so
    the reply synthesizes it when said.

    Raises:
        PortError: the TTS failed (the caller decides whether to go on without).
    """
    audio: dict[str, list[TTSAudio]] = {}
    for phrase in phrases:
        key = phrase_key(phrase)
        if not key or key in audio:
            continue
        pieces = [p async for p in tts.stream(key)]
        if any(len(p.pcm) for p in pieces):
            audio[key] = pieces
    return RenderedPhrases(audio, tts.sample_rate, tts.voice_name)
