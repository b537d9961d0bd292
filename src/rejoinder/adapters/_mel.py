"""Whisper-style 80-bin log-mel features in numpy (16 kHz, 25 ms window, 10 ms hop).

Recipe (as Whisper's feature extractor): optional zero-mean/unit-variance waveform normalisation;
centred STFT (reflect padding of n_fft/2), periodic Hann window of 400 samples, hop 160; power
spectrum; Slaney-normalised triangular mel filterbank (80 bands, 0–8 kHz, Slaney mel scale);
log10 with a 1e-10 floor; last frame dropped; dynamic range limited to 8 (log10 units) below the
maximum; finally ``(x + 4) / 4``.
"""

from __future__ import annotations

import numpy as np

SR = 16_000
N_FFT = 400
HOP = 160
N_MELS = 80


def _hz_to_mel(f: np.ndarray) -> np.ndarray:
    f = np.asarray(f, dtype=np.float64)
    linear = f * 3.0 / 200.0
    logpart = 15.0 + np.log(np.maximum(f, 1e-12) / 1000.0) * (27.0 / np.log(6.4))
    return np.where(f >= 1000.0, logpart, linear)


def _mel_to_hz(m: np.ndarray) -> np.ndarray:
    m = np.asarray(m, dtype=np.float64)
    linear = m * 200.0 / 3.0
    logpart = 1000.0 * np.exp((m - 15.0) * (np.log(6.4) / 27.0))
    return np.where(m >= 15.0, logpart, linear)


def _filterbank() -> np.ndarray:
    """(n_mels, n_fft//2+1) Slaney-normalised triangular filters."""
    edges_hz = _mel_to_hz(np.linspace(_hz_to_mel(0.0), _hz_to_mel(SR / 2), N_MELS + 2))
    bins_hz = np.linspace(0.0, SR / 2, N_FFT // 2 + 1)
    lo, mid, hi = edges_hz[:-2, None], edges_hz[1:-1, None], edges_hz[2:, None]
    rising = (bins_hz[None, :] - lo) / (mid - lo)
    falling = (hi - bins_hz[None, :]) / (hi - mid)
    tri = np.clip(np.minimum(rising, falling), 0.0, None)
    return tri * (2.0 / (hi - lo))


_FB = _filterbank()
_WINDOW = 0.5 - 0.5 * np.cos(2.0 * np.pi * np.arange(N_FFT) / N_FFT)  # periodic Hann


def log_mel(audio: np.ndarray, *, normalize: bool = True) -> np.ndarray:
    """Log-mel features of 16 kHz mono audio.

    Args:
        audio: 1-D float audio at 16 kHz (n samples).
        normalize: zero-mean/unit-variance normalise the waveform first (Smart Turn does).

    Returns:
        float32 array of shape (80, n // 160).
    """
    x = np.asarray(audio, dtype=np.float32)
    if normalize:
        x = (x - x.mean()) / np.sqrt(x.var() + 1e-7)
    padded = np.pad(x.astype(np.float64), N_FFT // 2, mode="reflect")
    frames = np.lib.stride_tricks.sliding_window_view(padded, N_FFT)[::HOP]
    power = np.abs(np.fft.rfft(frames * _WINDOW, axis=-1)) ** 2  # (frames, bins)
    mel = np.log10(np.maximum(power @ _FB.T, 1e-10)).T[:, :-1]
    mel = np.maximum(mel, mel.max() - 8.0)
    return ((mel + 4.0) / 4.0).astype(np.float32)
