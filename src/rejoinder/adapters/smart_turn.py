"""Smart Turn v3.2 end-of-turn model (ONNX, CPU).

Model: Smart Turn v3.2 (``smart-turn-v3.2-cpu.onnx``, 8.7 MB), BSD-2-Clause, by Daily; the file is
taken from inside the installed ``pipecat-ai`` wheel (``pipecat/audio/turn/smart_turn/data/``). The
package is never imported — only its directory is located. The model is a Whisper-tiny-style audio
encoder with a classifier head reading 8 s of Whisper log-mel features.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np

from ._mel import log_mel
from ._onnx import cpu_session
from ._paths import model_file

SAMPLE_RATE = 16_000
WINDOW_S = 8
WINDOW_SAMPLES = WINDOW_S * SAMPLE_RATE  # 128 000


def smart_turn_model_path() -> Path:
    """Path of ``smart-turn-v3.2-cpu.onnx`` inside the installed pipecat-ai package."""
    return model_file("pipecat", "audio/turn/smart_turn/data/smart-turn-v3.2-cpu.onnx",
                      what="Smart Turn v3.2 (ships in the pipecat-ai wheel)",
                      pip_spec="pipecat-ai==1.14.0 --no-deps")


def fit_window(audio: np.ndarray) -> np.ndarray:
    """Keep the last 8 s (128 000 samples at 16 kHz); shorter audio is zero-padded at the START."""
    x = np.asarray(audio, dtype=np.float32).reshape(-1)
    if x.size >= WINDOW_SAMPLES:
        return x[-WINDOW_SAMPLES:]
    out = np.zeros(WINDOW_SAMPLES, dtype=np.float32)
    if x.size:
        out[-x.size:] = x
    return out


class SmartTurnV3:
    """End-of-turn probability from the last ≤ 8 s of a caller's turn (float32 mono, 16 kHz).

    One call ≈ 50 ms on one CPU thread; it runs in ``asyncio.to_thread``.

    Args:
        model_path: override the ONNX file (default: the copy in the pipecat-ai wheel).
        threads: onnxruntime intra-op threads (default 1).

    Raises:
        MissingExtra: pipecat-ai (the carrier of the model file) is not installed.
    """

    sample_rate: int = SAMPLE_RATE

    def __init__(self, model_path: str | Path | None = None, *, threads: int = 1) -> None:
        self.model_path = Path(model_path) if model_path else smart_turn_model_path()
        self._session = cpu_session(self.model_path, threads)

    def completion_prob_sync(self, audio: np.ndarray) -> float:
        """Blocking variant of :meth:`completion_prob` (same arguments and result)."""
        feats = log_mel(fit_window(audio), normalize=True)[None]  # (1, 80, 800)
        (out,) = self._session.run(None, {"input_features": feats})
        return float(np.clip(np.asarray(out).reshape(-1)[0], 0.0, 1.0))

    async def completion_prob(self, audio: np.ndarray) -> float:
        """Probability in [0, 1] that the turn is complete.

        Args:
            audio: the turn so far, 1-D float32 mono at 16 kHz; only the last 8 s are used, and
                shorter audio is zero-padded at the start (as the model was trained).
        """
        return await asyncio.to_thread(self.completion_prob_sync, audio)
