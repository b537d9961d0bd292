"""Reading, resampling and converting audio.

Conventions: float audio is mono ``numpy.float32`` in [-1, 1]; PCM is mono ``int16``.
Every problem with an input file raises :class:`rejoinder.errors.AudioInputError` whose message
names the file and says how to fix it.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from .errors import AudioInputError

#: Peak amplitude (float, full scale = 1.0) below which a file counts as silent.
SILENCE_PEAK = 1e-4
#: Shortest accepted input, in seconds (one 32 ms VAD window at 16 kHz).
MIN_DURATION_S = 0.032


def load_audio(path: str | Path, *, min_duration_s: float = MIN_DURATION_S) -> tuple[np.ndarray, int]:
    """Read a WAV/FLAC/OGG file (any rate, channel count, int16/int24/int32/float) as mono float32.

    Channels are averaged (mixed down). Returns ``(samples, sample_rate_hz)`` with ``samples`` a
    1-D ``float32`` array in [-1, 1].

    Raises:
        AudioInputError: the file is missing, is not audio soundfile can decode, holds 0 samples,
            is shorter than ``min_duration_s`` seconds, or is silent (peak < 1e-4).
    """
    import soundfile as sf

    p = Path(path)
    if not p.exists():
        raise AudioInputError(f"{p}: file not found; check the path (relative paths resolve "
                              f"against {Path.cwd()})")
    if not p.is_file():
        raise AudioInputError(f"{p}: not a regular file; pass the path of a WAV or FLAC file")
    try:
        data, rate = sf.read(str(p), dtype="float32", always_2d=True)
    except Exception as exc:  # soundfile raises LibsndfileError / RuntimeError / TypeError
        with open(p, "rb") as fh:
            head = fh.read(12)
        known = head[:4] in (b"RIFF", b"fLaC", b"OggS", b"FORM") or head[:3] == b"ID3"
        hint = ("it looks like audio in a format libsndfile cannot read; convert it to a 16-bit "
                f"PCM WAV, e.g. `ffmpeg -i {p.name} out.wav`" if known else
                "it is not an audio file (no WAV/FLAC header); pass a WAV or FLAC recording")
        raise AudioInputError(f"{p}: cannot be decoded as audio ({exc}); {hint}") from exc
    if data.shape[0] == 0:
        raise AudioInputError(f"{p}: the file holds 0 samples; record or export the audio again")
    mono = data.mean(axis=1, dtype=np.float32) if data.shape[1] > 1 else data[:, 0]
    mono = np.ascontiguousarray(mono, dtype=np.float32)
    duration = mono.size / rate
    if duration < min_duration_s:
        raise AudioInputError(
            f"{p}: only {duration * 1000:.1f} ms of audio; at least {min_duration_s * 1000:.0f} ms "
            f"is needed — use a longer recording")
    peak = float(np.max(np.abs(mono)))
    if peak < SILENCE_PEAK:
        raise AudioInputError(
            f"{p}: the audio is silent (peak {peak:.2e} < {SILENCE_PEAK:g} of full scale); check the "
            f"microphone/recording level or pick another file")
    return mono, int(rate)


def resample(x: np.ndarray, from_hz: int, to_hz: int) -> np.ndarray:
    """Resample 1-D float32 audio from ``from_hz`` to ``to_hz`` (soxr, quality "HQ").

    Returns ``x`` unchanged (no copy) when the rates are equal.

    Raises:
        ValueError: a rate is not positive.
    """
    if from_hz <= 0 or to_hz <= 0:
        raise ValueError(f"sample rates must be positive, got {from_hz} -> {to_hz}")
    if from_hz == to_hz:
        return x
    import soxr

    return soxr.resample(np.asarray(x, dtype=np.float32), from_hz, to_hz, quality="HQ")


def to_int16(x: np.ndarray) -> np.ndarray:
    """float32 in [-1, 1] → int16 PCM (clipped, scaled by 32767)."""
    return (np.clip(np.asarray(x, dtype=np.float32), -1.0, 1.0) * 32767.0).astype(np.int16)


def to_float32(pcm: np.ndarray) -> np.ndarray:
    """int16 PCM → float32 in [-1, 1] (divided by 32768). Float input is returned as float32."""
    a = np.asarray(pcm)
    if a.dtype == np.int16:
        return a.astype(np.float32) / 32768.0
    return a.astype(np.float32, copy=False)


class TelephoneDecimator:
    """Streaming 16 kHz → 8 kHz for a live telephone line (int16 in and out, any chunk sizes).

    A 31-tap windowed-sinc low-pass (cut-off 3.6 kHz, Hamming window; design as in S. W. Smith,
    *The Scientist and Engineer's Guide to DSP*, ch. 16), then every second sample. Its delay is
    15 samples at 16 kHz (0.94 ms). soxr's streaming resamplers, fed 20 ms frames, hold back
    60–100 ms ("HQ", "MQ", "LQ"; measured), which a live line would add to every reply; its
    "QQ" quality has no anti-alias filter (Piper's 4–8 kHz energy would fold into the band).
    """

    TAPS = 31

    def __init__(self, cutoff_hz: float = 3600.0) -> None:
        n = np.arange(self.TAPS) - (self.TAPS - 1) / 2
        h = np.sinc(2.0 * cutoff_hz / 16000.0 * n) * np.hamming(self.TAPS)
        self._h = (h / h.sum()).astype(np.float32)
        self._hist = np.zeros(self.TAPS - 1, np.float32)
        self._n = 0  # input samples so far (keeps the 2:1 phase across chunks)

    def process(self, pcm: np.ndarray) -> np.ndarray:
        """int16 16 kHz in → int16 8 kHz out (about half as many samples)."""
        x = np.concatenate([self._hist, np.asarray(pcm, dtype=np.float32)])
        y = np.convolve(x, self._h, mode="valid")
        self._hist = x[len(x) - (self.TAPS - 1):]
        out = y[(-self._n) % 2::2]
        self._n += len(pcm)
        return np.clip(np.round(out), -32768, 32767).astype(np.int16)
