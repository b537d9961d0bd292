"""rejoinder.audio_io: reading any WAV/FLAC, resampling, conversions, and clear input errors."""

from __future__ import annotations

import numpy as np
import pytest
import soundfile as sf

from rejoinder.audio_io import load_audio, resample, to_float32, to_int16
from rejoinder.errors import AudioInputError


def _tone(n: int, sr: int, amp: float = 0.5) -> np.ndarray:
    return (amp * np.sin(2 * np.pi * 440 * np.arange(n) / sr)).astype(np.float32)


@pytest.mark.parametrize("fmt,subtype", [("WAV", "PCM_16"), ("WAV", "PCM_24"), ("WAV", "FLOAT"),
                                         ("FLAC", "PCM_16"), ("FLAC", "PCM_24")])
def test_load_any_format_mixes_to_mono(tmp_path, fmt, subtype):
    sr = 44_100
    left = _tone(sr // 2, sr)
    stereo = np.stack([left, np.zeros_like(left)], axis=1)
    path = tmp_path / f"x.{fmt.lower()}"
    sf.write(path, stereo, sr, format=fmt, subtype=subtype)
    x, rate = load_audio(path)
    assert rate == sr and x.dtype == np.float32 and x.ndim == 1 and x.size == left.size
    np.testing.assert_allclose(x, left / 2, atol=1e-3)


def test_missing_file(tmp_path):
    with pytest.raises(AudioInputError, match="not found"):
        load_audio(tmp_path / "nope.wav")


def test_not_audio(tmp_path):
    p = tmp_path / "notes.wav"
    p.write_text("this is a text file, not a wav\n" * 10)
    with pytest.raises(AudioInputError, match=r"notes\.wav.*cannot be decoded.*not an audio file"):
        load_audio(p)


def test_empty(tmp_path):
    p = tmp_path / "empty.wav"
    sf.write(p, np.zeros(0, np.float32), 16_000, subtype="PCM_16")
    with pytest.raises(AudioInputError, match="0 samples"):
        load_audio(p)


def test_silent(tmp_path):
    p = tmp_path / "silent.wav"
    sf.write(p, np.zeros(16_000, np.float32), 16_000, subtype="PCM_16")
    with pytest.raises(AudioInputError, match="silent"):
        load_audio(p)


def test_too_short(tmp_path):
    p = tmp_path / "short.wav"
    sf.write(p, _tone(100, 16_000), 16_000, subtype="PCM_16")
    with pytest.raises(AudioInputError, match=r"short\.wav.*ms of audio"):
        load_audio(p)


def test_directory_is_not_a_file(tmp_path):
    with pytest.raises(AudioInputError, match="not a regular file"):
        load_audio(tmp_path)


def test_resample_and_conversions():
    x = _tone(8_000, 8_000)
    assert resample(x, 8_000, 8_000) is x
    y = resample(x, 8_000, 16_000)
    assert y.dtype == np.float32 and abs(y.size - 16_000) <= 1
    with pytest.raises(ValueError):
        resample(x, 0, 16_000)
    pcm = to_int16(np.array([-2.0, -1.0, 0.0, 0.5, 1.0, 2.0], np.float32))
    assert pcm.dtype == np.int16 and pcm[0] == -32767 and pcm[-1] == 32767
    back = to_float32(pcm)
    assert back.dtype == np.float32 and np.all(np.abs(back) <= 1.0)
    assert abs(back[3] - 0.5) < 1e-3
