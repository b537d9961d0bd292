"""Silero VAD v6.2 (ONNX) batched across the calls of a process (``stack.vad: silero-batched``).

Model: Silero VAD v6.2, MIT license (snakers4/silero-vad): the ``silero_vad.onnx`` export with a
batch dimension (input ``(batch, 64 + 512)`` at 16 kHz, recurrent state ``(2, batch, 128)``,
``sr``), byte-identical in the ``silero-vad`` 6.2.3 wheel (``silero_vad/data/``) and in the
``pipecat-ai`` 1.14.0 wheel (``pipecat/audio/vad/data/``) that the embedded stack already
installs for Smart Turn; loaded from whichever is installed. (The single-stream default,
:class:`~rejoinder.adapters.silero_vad.SileroVAD`, uses faster-whisper's v6 export, whose first
axis is time, not batch.) One onnxruntime session per process serves every call through
:class:`~rejoinder.vadbatch.VadBatcher`: each call is one row of the batch with its own state and
64-sample context. Rows of one batch are independent: a call's probabilities are the same
whatever else is in the batch (``tests/adapters/test_silero_batch.py``).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..errors import ConfigError, MissingExtra
from ..vadbatch import BatchedVAD
from ._onnx import cpu_session
from ._paths import model_file

SAMPLE_RATE = 16_000
WINDOW = 512
CONTEXT = 64


def silero_batch_model_path() -> Path:
    """Path of the batch-dimension ``silero_vad.onnx`` (silero-vad or pipecat-ai wheel).

    Raises:
        MissingExtra: neither package is installed.
    """
    try:
        return model_file("silero_vad", "data/silero_vad.onnx", what="silero-vad (Silero VAD v6.2)",
                          pip_spec="silero-vad==6.2.3 --no-deps")
    except (MissingExtra, ConfigError):  # fall back to the copy in the pipecat-ai wheel
        return model_file("pipecat", "audio/vad/data/silero_vad.onnx",
                          what="pipecat-ai (Silero VAD v6.2 inside)",
                          pip_spec="pipecat-ai==1.14.0 --no-deps")


class SileroBatchModel:
    """The batched model: per-slot state ``(2, slots, 128)`` and context ``(slots, 64)``.

    Args:
        model_path: override the ONNX file.
        threads: onnxruntime intra-op threads (default 1).
    """

    sample_rate = SAMPLE_RATE
    window_samples = WINDOW
    #: scored on the batcher's own worker thread, beside the event loop (rejoinder.vadbatch)
    offload = True

    def __init__(self, model_path: str | Path | None = None, *, threads: int = 1) -> None:
        self.model_path = Path(model_path) if model_path else silero_batch_model_path()
        self._session = cpu_session(self.model_path, threads)
        self._sr = np.array(SAMPLE_RATE, dtype=np.int64)
        self._state = np.zeros((2, 0, 128), dtype=np.float32)
        self._ctx = np.zeros((0, CONTEXT), dtype=np.float32)

    def grow(self, slots: int) -> None:
        state = np.zeros((2, slots, 128), dtype=np.float32)
        state[:, :self._state.shape[1]] = self._state
        ctx = np.zeros((slots, CONTEXT), dtype=np.float32)
        ctx[:len(self._ctx)] = self._ctx
        self._state, self._ctx = state, ctx

    def reset_slot(self, slot: int) -> None:
        self._state[:, slot] = 0.0
        self._ctx[slot] = 0.0

    def run(self, windows: np.ndarray, slots: np.ndarray) -> np.ndarray:
        """P(speech) for each row of ``windows`` (float32 ``(k, 512)``) with ``slots``' state."""
        x = np.concatenate([self._ctx[slots], windows], axis=1)
        prob, state = self._session.run(None, {"input": x, "state": self._state[:, slots],
                                               "sr": self._sr})
        self._state[:, slots] = state
        self._ctx[slots] = windows[:, -CONTEXT:]
        return prob.reshape(-1)


class SileroBatchedVAD(BatchedVAD):
    """One call's Silero VAD stream, batched with every other call of the process (see the module
    docstring). Construct one per call (``Runtime.new_stack`` does)."""

    sample_rate = SAMPLE_RATE
    window_samples = WINDOW

    @classmethod
    def make_model(cls) -> SileroBatchModel:
        return SileroBatchModel()
