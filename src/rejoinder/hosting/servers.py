"""Model-server processes for the hosting arrangements: start, probe, measure, stop.

A :class:`ServerProcess` runs ``python -m rejoinder models serve …`` (inside a network namespace
when given one), waits for its ``ready`` line, and measures **cold start** as the time from
process start to the first answered request (a probe sent through the same adapter the agent
uses). :class:`ProcessSampler` reports CPU and RSS of any set of processes over an interval.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import psutil

from ..errors import RejoinderError


class ServerStartError(RejoinderError):
    """A model server did not come up (its log tail is in the message)."""


def _src_root() -> str:
    """The folder holding this ``rejoinder`` package, so a child process imports this copy."""
    return os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@dataclass
class ServerProcess:
    """One ``models serve`` process. ``args`` are the arguments after ``models serve``."""

    name: str
    args: list[str]
    prefix: list[str] = field(default_factory=list)   # e.g. ``ip netns exec NS``
    env: dict[str, str] = field(default_factory=dict)
    log_path: str | None = None
    proc: subprocess.Popen | None = None
    started_at: float = 0.0
    listening_ms: float | None = None
    cold_start_ms: float | None = None

    async def start(self, timeout_s: float = 120.0) -> None:
        """Start the process and wait for its ``ready`` line.

        Raises:
            ServerStartError: it exited or stayed silent (log tail included).
        """
        env = {**os.environ, **self.env,
               "PYTHONPATH": os.pathsep.join(filter(None, [_src_root(), os.environ.get("PYTHONPATH")]))}
        argv = [*self.prefix, sys.executable, "-m", "rejoinder", "models", "serve", *self.args]
        self._log = open(self.log_path, "wb") if self.log_path else subprocess.DEVNULL
        self.started_at = time.perf_counter()
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=self._log, env=env)
        loop = asyncio.get_running_loop()
        try:
            line = await asyncio.wait_for(loop.run_in_executor(None, self.proc.stdout.readline), timeout_s)
        except TimeoutError:
            line = b""
        if not line.startswith(b"ready"):
            self.stop()
            tail = open(self.log_path, "rb").read()[-1500:].decode("utf-8", "replace") if self.log_path else ""
            raise ServerStartError(f"model server {self.name} did not start ({' '.join(argv)}): {tail}")
        self.listening_ms = 1000.0 * (time.perf_counter() - self.started_at)

    def first_answer(self) -> None:
        """Record cold start: call right after the first request this server answered."""
        if self.cold_start_ms is None:
            self.cold_start_ms = round(1000.0 * (time.perf_counter() - self.started_at), 1)

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def describe(self) -> dict[str, Any]:
        """Command, pid and timings (the API key in the arguments is redacted)."""
        args = ["<redacted>" if i and self.args[i - 1] == "--api-key" else a for i, a in enumerate(self.args)]
        return {"args": args, "namespace_prefix": self.prefix, "pid": self.pid,
                "listening_ms": round(self.listening_ms, 1) if self.listening_ms else None,
                "cold_start_ms": self.cold_start_ms}

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc is not None and self.proc.stdout:
            self.proc.stdout.close()
        if hasattr(self, "_log") and self._log is not subprocess.DEVNULL:
            self._log.close()


class ProcessSampler:
    """CPU time and peak RSS of named processes between :meth:`start` and :meth:`stop`."""

    def __init__(self, pids: dict[str, int], interval_s: float = 0.2) -> None:
        self.procs = {name: psutil.Process(pid) for name, pid in pids.items()}
        self.interval = interval_s
        self._task: asyncio.Task | None = None

    def start(self) -> None:
        self.t0 = time.perf_counter()
        self.cpu0 = {n: self._cpu(p) for n, p in self.procs.items()}
        self.peak = {n: self._rss(p) for n, p in self.procs.items()}
        self._task = asyncio.get_running_loop().create_task(self._sample())

    @staticmethod
    def _cpu(p: psutil.Process) -> float:
        try:
            t = p.cpu_times()
            return t.user + t.system
        except psutil.Error:
            return 0.0

    @staticmethod
    def _rss(p: psutil.Process) -> int:
        try:
            return p.memory_info().rss
        except psutil.Error:
            return 0

    async def _sample(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            for n, p in self.procs.items():
                self.peak[n] = max(self.peak[n], self._rss(p))

    async def stop(self) -> dict[str, dict[str, float | None]]:
        """Per process: ``cpu_s``, ``cpu_pct`` (100 = one core) and ``rss_peak_mb``."""
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        wall = time.perf_counter() - self.t0
        out = {}
        for n, p in self.procs.items():
            cpu = self._cpu(p) - self.cpu0[n]
            out[n] = {"cpu_s": round(cpu, 3), "cpu_pct": round(100.0 * cpu / wall, 1) if wall > 0 else None,
                      "rss_peak_mb": round(max(self.peak[n], self._rss(p)) / 2**20, 1)}
        return out


async def probe_tts(tts: Any) -> float:
    """Time (ms) to the first audio of a short request through ``tts`` (an adapter)."""
    t0 = time.perf_counter()
    async for piece in tts.stream("Ready."):
        if len(piece.pcm):
            break
    return 1000.0 * (time.perf_counter() - t0)


async def probe_stt(stt: Any) -> float:
    """Time (ms) to the final transcript of 0.5 s of silence through ``stt`` (an adapter)."""
    async def audio():
        yield np.zeros(stt.sample_rate // 2, np.float32)

    t0 = time.perf_counter()
    async for _ in stt.stream(audio()):
        pass
    return 1000.0 * (time.perf_counter() - t0)


async def probe_llm(llm: Any) -> float:
    """Time (ms) to the first token of a one-line chat request through ``llm`` (an adapter)."""
    from ..ports import ChatMessage, LLMRequest

    t0 = time.perf_counter()
    async for _ in llm.stream(LLMRequest(messages=(ChatMessage("user", "Say ready."),), max_tokens=2)):
        break
    return 1000.0 * (time.perf_counter() - t0)


async def socket_rtt_ms(url: str, api_key: str, n: int = 30) -> list[float]:
    """Round trips (ms) of ``n`` WebSocket pings on a model server's socket (``ws://…`` with the
    path of a Cartesia endpoint): what the network adds shows up here with nothing else."""
    from websockets.asyncio.client import connect

    out = []
    async with connect(url, additional_headers={"X-API-Key": api_key}, compression=None) as ws:
        for _ in range(n):
            t0 = time.perf_counter()
            await (await ws.ping())
            out.append(1000.0 * (time.perf_counter() - t0))
    return out
