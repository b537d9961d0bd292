"""espeak-ng formant TTS through ctypes, with real word timings.

Engine: espeak-ng 1.52, GPL-3.0, loaded from the ``espeakng-loader`` wheel (shared library and
``espeak-ng-data`` inside the wheel; no system package needed). Robotic but instant (≈ 5 ms per
sentence) — also useful as a distinct simulated-caller voice.
"""

from __future__ import annotations

import asyncio
import ctypes
import threading
from pathlib import Path
from typing import AsyncIterator

import numpy as np

from ..errors import MissingExtra
from ..ports import PortError, TTSAudio

_AUDIO_OUTPUT_SYNCHRONOUS = 2
_INITIALIZE_DONT_EXIT = 0x8000
_EVENT_WORD = 1
_EVENT_LIST_TERMINATED = 0
_CHARS_UTF8 = 1
_ENDPAUSE = 0x1000
_POS_CHARACTER = 1
_PARAM_RATE = 1


class _EspeakEvent(ctypes.Structure):
    _fields_ = [
        ("type", ctypes.c_int),
        ("unique_identifier", ctypes.c_uint),
        ("text_position", ctypes.c_int),  # 1-based character index
        ("length", ctypes.c_int),  # characters
        ("audio_position", ctypes.c_int),  # ms
        ("sample", ctypes.c_int),
        ("user_data", ctypes.c_void_p),
        ("id", ctypes.c_char * 8),  # union {int number; const char *name; char string[8]}
    ]


_CALLBACK = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_short), ctypes.c_int,
                             ctypes.POINTER(_EspeakEvent))

# espeak-ng's C API is process-global state: one library handle, one lock, for every instance.
_LOCK = threading.Lock()
_LIB: ctypes.CDLL | None = None
_RATE = 0
_SINK: dict = {"samples": [], "words": []}


def _on_synth(wav, numsamples, events):  # called by espeak inside espeak_Synth (same thread)
    if numsamples > 0 and wav:
        _SINK["samples"].append(np.ctypeslib.as_array(wav, shape=(numsamples,)).copy())
    i = 0
    while events[i].type != _EVENT_LIST_TERMINATED:
        ev = events[i]
        if ev.type == _EVENT_WORD:
            _SINK["words"].append((ev.text_position, ev.length, ev.audio_position))
        i += 1
    return 0


_CB = _CALLBACK(_on_synth)  # keep a reference: espeak holds the raw pointer


def _library() -> tuple[ctypes.CDLL, int]:
    global _LIB, _RATE
    if _LIB is None:
        try:
            import espeakng_loader
        except ImportError as exc:
            raise MissingExtra("espeak-ng TTS (GPL-3.0, optional)", "rejoinder[espeak]") from exc
        lib = ctypes.CDLL(espeakng_loader.get_library_path())
        lib.espeak_Initialize.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_char_p, ctypes.c_int]
        lib.espeak_Initialize.restype = ctypes.c_int
        lib.espeak_SetSynthCallback.argtypes = [_CALLBACK]
        lib.espeak_SetVoiceByName.argtypes = [ctypes.c_char_p]
        lib.espeak_SetParameter.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int]
        lib.espeak_Synth.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_uint, ctypes.c_int,
                                     ctypes.c_uint, ctypes.c_uint, ctypes.c_void_p, ctypes.c_void_p]
        data_parent = str(Path(espeakng_loader.get_data_path()).parent).encode()
        rate = lib.espeak_Initialize(_AUDIO_OUTPUT_SYNCHRONOUS, 0, data_parent, _INITIALIZE_DONT_EXIT)
        if rate <= 0:
            raise PortError(f"espeak_Initialize failed (returned {rate})")
        lib.espeak_SetSynthCallback(_CB)
        _LIB, _RATE = lib, rate
    return _LIB, _RATE


class EspeakTTS:
    """espeak-ng TTS: int16 mono PCM at ``sample_rate`` (22 050 Hz) with per-word timings.

    ``TTSAudio.words`` holds ``(word, start_ms, end_ms)`` from espeak's WORD events; a word ends
    where the next one starts (the last one at the end of the audio, trailing pause included).
    Calls are serialised process-wide (espeak's API is global state) and run in a worker thread.

    Args:
        voice: espeak-ng voice name (default "en-us").
        rate: speaking rate in words per minute (default 175; espeak accepts 80–450).

    Raises:
        MissingExtra: espeakng-loader is not installed.
        PortError: the library failed to initialise or the voice is unknown.
    """

    def __init__(self, voice: str = "en-us", rate: int = 175) -> None:
        _library()
        self.voice = voice
        self.rate = rate
        self.voice_name = f"espeak-ng:{voice}"
        self.sample_rate: int = _RATE

    def synthesize_sync(self, text: str) -> TTSAudio:
        """Blocking synthesis of ``text`` into one :class:`TTSAudio` (int16, 22 050 Hz)."""
        lib, _ = _library()
        data = text.encode("utf-8") + b"\0"
        with _LOCK:
            if lib.espeak_SetVoiceByName(self.voice.encode()) != 0:
                raise PortError(f"espeak-ng has no voice {self.voice!r}")
            lib.espeak_SetParameter(_PARAM_RATE, int(self.rate), 0)
            _SINK["samples"], _SINK["words"] = [], []
            err = lib.espeak_Synth(data, len(data), 0, _POS_CHARACTER, 0,
                                   _CHARS_UTF8 | _ENDPAUSE, None, None)
            samples, raw_words = _SINK["samples"], _SINK["words"]
            _SINK["samples"], _SINK["words"] = [], []
        if err != 0:
            raise PortError(f"espeak_Synth failed with code {err}")
        pcm = np.concatenate(samples).astype(np.int16) if samples else np.zeros(0, np.int16)
        total_ms = pcm.size * 1000.0 / self.sample_rate
        words: list[tuple[str, float, float]] = []
        span_end = -1  # end (exclusive char index) of the last reported word
        for k, (pos, length, start) in enumerate(raw_words):
            end = raw_words[k + 1][2] if k + 1 < len(raw_words) else total_ms
            first = max(pos - 1, 0)
            if words and first < span_end:  # one written word spoken as several ("42")
                w, s0, _ = words[-1]
                words[-1] = (w, s0, float(max(end, s0)))
                continue
            span_end = first + length
            words.append((text[first:span_end], float(start), float(max(end, start))))
        return TTSAudio(pcm=pcm, words=tuple(words))

    async def stream(self, text: str) -> AsyncIterator[TTSAudio]:
        """Synthesize ``text`` (all of it in one piece: espeak takes ≈ 5 ms per sentence).

        Raises:
            PortError: synthesis failed.
        """
        if not text.strip():
            return
        yield await asyncio.to_thread(self.synthesize_sync, text)
