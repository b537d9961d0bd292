"""The batched Silero VAD (real model): each call's row is scored as if it ran alone."""

from __future__ import annotations

import numpy as np

from rejoinder.adapters.silero_batch import SileroBatchModel
from rejoinder.audio_io import load_audio, resample
from rejoinder.scenario import ASTERISK_DIR


def speech() -> np.ndarray:
    raw, sr = load_audio(ASTERISK_DIR / "agent-alreadyon.wav")
    x = resample(raw, sr, 16000).astype(np.float32)
    return np.concatenate([np.zeros(8000, np.float32), x, np.zeros(8000, np.float32)])


def test_rows_are_independent_and_match_a_single_stream() -> None:
    x = speech()
    n = len(x) // 512
    alone = SileroBatchModel()
    alone.grow(1)
    ref = [float(alone.run(x[None, i * 512:(i + 1) * 512], np.array([0]))[0]) for i in range(n)]
    assert max(ref) > 0.9 and min(ref) < 0.1  # it hears the prompt and the silence around it

    batch = SileroBatchModel()
    batch.grow(8)
    shifted = [np.roll(x, 512 * k) for k in range(8)]  # eight calls, each at another moment
    got = np.zeros((n, 8))
    for i in range(n):
        rows = np.stack([s[i * 512:(i + 1) * 512] for s in shifted])
        # the slots in another order than the rows' calls: state follows the slot
        order = np.array([3, 1, 7, 0, 2, 6, 5, 4])
        probs = batch.run(rows[order], order)
        got[i, order] = probs
    assert np.allclose(got[:, 0], ref, atol=1e-4)
    for k in range(1, 8):  # call k heard the same audio k windows later
        assert np.allclose(got[k:, k], ref[:n - k], atol=2e-2)


def test_reset_slot_clears_only_that_call() -> None:
    x = speech()
    m = SileroBatchModel()
    m.grow(2)
    for i in range(40):
        w = x[i * 512:(i + 1) * 512]
        m.run(np.stack([w, w]), np.array([0, 1]))
    m.reset_slot(1)
    assert np.all(m._state[:, 1] == 0) and np.any(m._state[:, 0] != 0)
    assert np.all(m._ctx[1] == 0)
