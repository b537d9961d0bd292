"""Pieces shared by the model servers: PCM encodings on the wire, API-key checks, server faults.

PCM encodings (Cartesia's names): ``pcm_s16le`` (int16 little-endian) and ``pcm_f32le`` (float32
little-endian in [-1, 1]), mono. μ-law/A-law are refused with a clear error (not implemented).

Server-side faults use the fault-spec syntax of :mod:`rejoinder.adapters.faults`
(``tts:drop@2%0.3``), read by the server instead of an in-process wrapper, so a failure travels
over the real socket: ``error`` sends the protocol's error message (Cartesia ``error``, SageMaker
``ModelStreamError``) after ``after`` audio chunks, ``drop`` closes the connection abruptly,
``stall=ms`` pauses, ``slow=ms`` delays the first chunk, and ``garbage`` (servers only) sends a
malformed frame.
"""

from __future__ import annotations

import asyncio
import hmac
import random
from dataclasses import dataclass, field

import numpy as np

from ..adapters.faults import Fault, parse_faults
from ..errors import ConfigError

ENCODINGS = ("pcm_s16le", "pcm_f32le")
SAMPLE_RATES = (8000, 16000, 22050, 24000, 44100, 48000)  # Cartesia's output rates


def encode_pcm(pcm: np.ndarray, encoding: str) -> bytes:
    """int16 mono PCM → bytes in ``encoding``.

    Raises:
        ValueError: an encoding other than :data:`ENCODINGS`.
    """
    if encoding == "pcm_s16le":
        return pcm.astype("<i2", copy=False).tobytes()
    if encoding == "pcm_f32le":
        return (pcm.astype("<f4") / 32768.0).tobytes()
    raise ValueError(f"encoding {encoding!r} is not supported; use one of {', '.join(ENCODINGS)}")


def decode_pcm(data: bytes, encoding: str) -> np.ndarray:
    """Bytes in ``encoding`` → float32 mono in [-1, 1].

    Raises:
        ValueError: an unknown encoding, or a byte count that is not a whole number of samples.
    """
    width = {"pcm_s16le": 2, "pcm_f32le": 4}.get(encoding)
    if width is None:
        raise ValueError(f"encoding {encoding!r} is not supported; use one of {', '.join(ENCODINGS)}")
    if len(data) % width:
        raise ValueError(f"{len(data)} bytes is not a whole number of {encoding} samples")
    if encoding == "pcm_s16le":
        return np.frombuffer(data, dtype="<i2").astype(np.float32) / 32768.0
    return np.frombuffer(data, dtype="<f4").astype(np.float32)


def key_matches(expected: str | None, given: str | None) -> bool:
    """Constant-time API-key check; ``expected`` None means the server runs without auth."""
    if expected is None:
        return True
    return given is not None and hmac.compare_digest(expected.encode(), given.encode())


def bearer_or_key(headers, query: dict[str, str]) -> str | None:
    """The API key a Cartesia client sent: ``X-API-Key``, ``Authorization: Bearer``, or the
    ``api_key`` query parameter (browsers)."""
    key = headers.get("X-API-Key") or headers.get("x-api-key")
    if key:
        return key
    auth = headers.get("Authorization") or headers.get("authorization") or ""
    if auth.lower().startswith("bearer "):
        return auth[7:].strip()
    return query.get("api_key") or None


@dataclass
class ServerFaults:
    """Faults a server injects into the streams it sends (seeded; one draw per request)."""

    faults: list[Fault] = field(default_factory=list)
    seed: int = 0

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)
        self.fired = 0

    @classmethod
    def parse(cls, spec: str | None, stage: str, seed: int = 0) -> "ServerFaults":
        """Faults of ``stage`` in ``spec`` (``garbage`` allowed besides the usual kinds).

        Raises:
            ConfigError: a malformed spec.
        """
        out: list[Fault] = []
        for part in filter(None, (p.strip() for p in (spec or "").split(","))):
            if ":garbage" in part:
                base = parse_faults(part.replace(":garbage", ":drop"))[0]
                out.append(Fault(base.stage, "garbage", 0.0, base.after, base.probability))
            else:
                out.extend(parse_faults(part))
        if any(f.stage != stage for f in out):
            raise ConfigError(f"server faults for the {stage} server must all start with '{stage}:'")
        return cls(out, seed)

    def draw(self) -> list[Fault]:
        """The faults that fire for one request."""
        active = [f for f in self.faults if self.rng.random() < f.probability]
        self.fired += len(active)
        return active


async def due_fault(active: list[Fault], sent: int) -> str | None:
    """Before audio chunk number ``sent`` of a request: sleep for ``slow``/``stall`` faults, and
    return the kind (``error``, ``drop`` or ``garbage``) of a fault that ends the stream here."""
    for f in active:
        if f.kind == "slow" and sent == 0:
            await asyncio.sleep(f.value_ms / 1000.0)
        if f.after != sent:
            continue
        if f.kind == "stall":
            await asyncio.sleep(f.value_ms / 1000.0)
        elif f.kind in ("error", "drop", "garbage"):
            return f.kind
    return None
