"""Crash-safe block writers: WAV recordings and SQLite transactions used across the package."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import numpy as np
import soundfile as sf


class WavWriter:
    """Writes int16 PCM frames (``channels`` columns) to a WAV file in blocks of ``block``
    samples, flushing the file after each block, so a crash keeps all but the last < 1 s."""

    def __init__(self, path: Path, rate: int = 16000, channels: int = 1, block: int = 16000) -> None:
        self._sf = sf.SoundFile(str(path), "w", samplerate=rate, channels=channels, subtype="PCM_16")
        self._buf = np.zeros((block, channels), dtype=np.int16)
        self._fill = 0

    def write(self, *columns: np.ndarray) -> None:
        """Append one frame: one int16 array per channel (all as long as the first)."""
        n = len(columns[0])
        if self._fill + n > len(self._buf):
            self.flush()
        for ch, col in enumerate(columns):
            self._buf[self._fill:self._fill + n, ch] = col[:n]
        self._fill += n

    def flush(self) -> None:
        if self._fill:
            self._sf.write(self._buf[:self._fill])
            self._sf.flush()
            self._fill = 0

    def close(self) -> None:
        self.flush()
        self._sf.close()


class transaction:
    """``with transaction(conn):`` — BEGIN IMMEDIATE … COMMIT, ROLLBACK on exception."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn

    def __enter__(self) -> sqlite3.Connection:
        self.conn.execute("BEGIN IMMEDIATE")
        return self.conn

    def __exit__(self, exc_type, exc, tb) -> None:
        self.conn.execute("ROLLBACK" if exc_type else "COMMIT")
