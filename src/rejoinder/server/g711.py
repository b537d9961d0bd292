"""G.711 μ-law codec (telephone audio), vectorised with lookup tables.

``audioop`` is deprecated and gone in Python 3.13, so the codec lives here: encoding is one table
lookup per sample over a 65,536-entry table (int16 → byte), decoding one lookup over 256 entries.
The tables follow ITU-T G.711 (bias 0x84, clip 32635, bits inverted on the wire).
"""

from __future__ import annotations

import numpy as np

_BIAS = 0x84
_CLIP = 32635


def _decode_table() -> np.ndarray:
    u = ~np.arange(256, dtype=np.int32) & 0xFF
    sign = u & 0x80
    exponent = (u >> 4) & 0x07
    mantissa = u & 0x0F
    mag = (((mantissa << 3) + _BIAS) << exponent) - _BIAS
    return np.where(sign != 0, -mag, mag).astype(np.int16)


def _encode_table() -> np.ndarray:
    x = np.arange(65536, dtype=np.int32)
    x = np.where(x >= 32768, x - 65536, x)  # index = int16 bits viewed as uint16
    sign = np.where(x < 0, 0x80, 0)
    mag = np.minimum(np.abs(x), _CLIP) + _BIAS
    exponent = np.floor(np.log2(mag)).astype(np.int32) - 7
    exponent = np.clip(exponent, 0, 7)
    mantissa = (mag >> (exponent + 3)) & 0x0F
    return (~(sign | (exponent << 4) | mantissa) & 0xFF).astype(np.uint8)


_DECODE = _decode_table()
_ENCODE = _encode_table()


def ulaw_decode(data: bytes | np.ndarray) -> np.ndarray:
    """μ-law bytes → int16 PCM (same length)."""
    return _DECODE[np.frombuffer(data, dtype=np.uint8)]


def ulaw_encode(pcm: np.ndarray) -> bytes:
    """int16 PCM → μ-law bytes (same length)."""
    return _ENCODE[np.asarray(pcm, dtype=np.int16).view(np.uint16)].tobytes()
