"""What the caller heard, as text: the embedded Whisper base, in a low-priority worker process.

A remote agent's internals are not visible, so the words of its replies are scored on a
transcript of the audio the caller actually heard (up to a cut). Transcription is CPU-heavy and
the target usually runs on the same machine, so it runs in one separate process at the lowest
scheduling priority (``nice 19``): while calls are being measured it only gets CPU time nobody
else wants, and it never sits on the caller loop's event loop. Model: Whisper base
(CTranslate2 int8, :class:`rejoinder.adapters.whisper_stt.WhisperSTT`), no vocabulary prompt, so
the transcript is not biased towards the words a scenario expects.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor

import numpy as np

_STT = None


def _init(nice: int, threads: int) -> None:
    global _STT
    try:
        os.nice(nice)
    except OSError:
        pass
    from ...adapters.whisper_stt import WhisperSTT
    _STT = WhisperSTT(cpu_threads=threads)


def _transcribe(pcm: np.ndarray) -> str:
    assert _STT is not None
    return _STT.transcribe_sync(pcm.astype(np.float32) / 32768.0)


def _ping() -> bool:
    return _STT is not None


class Transcriber:
    """Whisper base in one worker process (spawned, ``nice`` ``19``): ``await text(pcm)``.

    Raises (from :meth:`start`):
        MissingExtra: faster-whisper or the weights are not installed (named with the fix).
    """

    def __init__(self, *, nice: int = 19, threads: int = 2) -> None:
        self.nice = nice
        self.threads = threads
        self._pool: ProcessPoolExecutor | None = None

    async def start(self) -> None:
        """Start the worker and load the model (once)."""
        if self._pool is not None:
            return
        self._pool = ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"),
                                         initializer=_init, initargs=(self.nice, self.threads))
        await asyncio.get_running_loop().run_in_executor(self._pool, _ping)

    async def text(self, pcm: np.ndarray) -> str:
        """Transcribe int16 mono 16 kHz audio; '' for no audio."""
        if len(pcm) < 1600:  # under 100 ms: nothing Whisper can read
            return ""
        await self.start()
        return await asyncio.get_running_loop().run_in_executor(self._pool, _transcribe, pcm)

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None
