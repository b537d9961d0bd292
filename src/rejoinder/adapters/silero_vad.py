"""Silero VAD v6 (ONNX) voice activity detector.

Model: Silero VAD v6, MIT license (snakers4/silero-vad), loaded from the copy shipped inside the
``faster-whisper`` wheel (``faster_whisper/assets/silero_vad_v6.onnx``); run with onnxruntime on one
thread.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ._onnx import cpu_session
from ._paths import model_file

SAMPLE_RATE = 16_000
WINDOW = 512  # samples, 32 ms at 16 kHz
CONTEXT = 64  # samples of the previous window prepended to each input


def silero_model_path() -> Path:
    """Path of ``silero_vad_v6.onnx`` inside the installed faster-whisper package."""
    return model_file("faster_whisper", "assets/silero_vad_v6.onnx",
                      what="faster-whisper (Silero VAD model)", pip_spec="faster-whisper==1.2.1")


class SileroVAD:
    """Streaming Silero VAD v6: one 512-sample (32 ms) float32 window at 16 kHz in, P(speech) out.

    The 64-sample context (tail of the previous window) and the LSTM state (h, c: 2 × (1,1,128),
    i.e. (2,1,128) in all) are carried between calls; :meth:`reset` clears them at a new stream.
    ``speech_prob`` is synchronous and cheap (≈0.1 ms); the input buffer is preallocated.

    Args:
        model_path: override the ONNX file (default: the one in faster-whisper).
        threads: onnxruntime intra-op threads (default 1).

    Raises:
        MissingExtra: faster-whisper is not installed.
    """

    sample_rate: int = SAMPLE_RATE
    window_samples: int = WINDOW

    def __init__(self, model_path: str | Path | None = None, *, threads: int = 1) -> None:
        self.model_path = Path(model_path) if model_path else silero_model_path()
        self._session = cpu_session(self.model_path, threads)
        self._buf = np.zeros((1, CONTEXT + WINDOW), dtype=np.float32)
        self._window_view = self._buf[0, CONTEXT:]
        self._h = np.zeros((1, 1, 128), dtype=np.float32)
        self._c = np.zeros((1, 1, 128), dtype=np.float32)
        self._feeds = {"input": self._buf, "h": self._h, "c": self._c}
        self._outputs = ["speech_probs", "hn", "cn"]

    def reset(self) -> None:
        """Clear the carried context and recurrent state (start of a new audio stream)."""
        self._buf.fill(0.0)
        self._h = np.zeros((1, 1, 128), dtype=np.float32)
        self._c = np.zeros((1, 1, 128), dtype=np.float32)
        self._feeds["h"] = self._h
        self._feeds["c"] = self._c

    def speech_prob(self, window: np.ndarray) -> float:
        """Speech probability in [0, 1] for one window.

        Args:
            window: exactly 512 samples (32 ms at 16 kHz), float32 mono in [-1, 1]
                (other float/int dtypes are converted as values, not rescaled).

        Raises:
            ValueError: the window is not 1-D with 512 samples.
        """
        if window.shape != (WINDOW,):
            raise ValueError(
                f"SileroVAD needs exactly {WINDOW} samples (32 ms at {SAMPLE_RATE} Hz) per call, "
                f"got shape {window.shape}; split the stream into {WINDOW}-sample windows")
        self._window_view[:] = window
        prob, h, c = self._session.run(self._outputs, self._feeds)
        self._feeds["h"] = h
        self._feeds["c"] = c
        self._buf[0, :CONTEXT] = self._buf[0, WINDOW:]
        return float(prob.reshape(-1)[0])
