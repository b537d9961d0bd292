"""Where live calls are recorded: one folder per call, in the same timeline format as
``rejoinder call`` (``timeline.jsonl``: every event, then one ``turn`` summary line per turn).

Folder ``<root>/<UTC time>-<transport>-<call_id>/`` holds:

* ``timeline.jsonl`` — written as the call goes (flushed per line);
* ``caller.wav`` — the caller's audio as the server received it (16 kHz mono); its first sample is
  at ``caller_origin_ms`` on the call clock;
* ``agent.wav`` — the agent's audio as the server played it out (16 kHz mono, silence included);
  its first sample is at ``agent_origin_ms``;
* ``call.json`` — transport, client facts, clock-sync quality, how the call ended, turn summaries.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import numpy as np

from ..recording import WavWriter
from ..timeline import Timeline



class CallRecord:
    """The records of one call (all no-ops when ``folder`` is None)."""

    def __init__(self, folder: Path | None) -> None:
        self.folder = folder
        self.timeline_path = folder / "timeline.jsonl" if folder else None
        self.caller_origin_ms: float | None = None
        self.agent_origin_ms: float | None = None
        self._caller = WavWriter(folder / "caller.wav") if folder else None
        self._agent = WavWriter(folder / "agent.wav") if folder else None
        self.summaries: list[dict[str, Any]] = []

    def caller(self, frame: np.ndarray) -> None:
        if self._caller is not None:
            self._caller.write(frame)

    def agent(self, frame: np.ndarray, t_ms: float) -> None:
        if self.agent_origin_ms is None:
            self.agent_origin_ms = t_ms
        if self._agent is not None:
            self._agent.write(frame)

    def finish(self, timeline: Timeline, meta: dict[str, Any]) -> None:
        """Write the per-turn summaries and ``call.json``; close every file."""
        self.summaries = [r.summary() for r in timeline.records()]
        for s in self.summaries:
            timeline.write_event({"type": "turn", **s})
        timeline.close()
        for w in (self._caller, self._agent):
            if w is not None:
                w.close()
        if self.folder is not None:
            doc = {**meta, "caller_origin_ms": self.caller_origin_ms,
                   "agent_origin_ms": self.agent_origin_ms, "turns": self.summaries}
            (self.folder / "call.json").write_text(json.dumps(doc, indent=1, default=str),
                                                   encoding="utf-8")


class CallStore:
    """Creates one :class:`CallRecord` per call under ``root`` (None: keep nothing on disk)."""

    def __init__(self, root: Path | None) -> None:
        self.root = root

    def open(self, call_id: str, transport: str) -> CallRecord:
        if self.root is None:
            return CallRecord(None)
        stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
        folder = self.root / f"{stamp}-{transport}-{call_id}"
        folder.mkdir(parents=True, exist_ok=True)
        return CallRecord(folder)


class LiveRuns:
    """Live calls in the harness run store (one store, one schema): one run per server process
    (``suite = "live"``), one ``calls`` row per call (scenario ``live-browser`` / ``live-twilio``)
    with its turns; the call folder is the row's ``artifacts``."""

    def __init__(self, path: str | Path | None, conditions: dict[str, Any], command: str) -> None:
        import threading
        from ..harness.store import open_store
        self.store = open_store(path)
        self.run_id = self.store.begin_run(conditions, suite="live", command=command)
        self._lock = threading.Lock()
        self.calls = 0

    def add(self, record: CallRecord, meta: dict[str, Any], transcript: str, concurrency: int) -> None:
        """Blocking (SQLite): call it off the event loop."""
        ended = meta.get("ended") or {}
        call = {"id": meta["call_id"], "scenario": f"live-{meta['transport']}", "concurrency": concurrency,
                "started_at": meta.get("started_at"), "duration_ms": meta.get("duration_ms"),
                "success": ended.get("code") == 1000, "failures": [],
                "error": None if ended.get("code") == 1000 else f"{ended.get('code')}: {ended.get('reason')}",
                "transcript": transcript, "artifacts": str(record.folder) if record.folder else None,
                "extra": {k: meta.get(k) for k in ("client", "clock_sync", "ended")}}
        with self._lock:
            self.store.add_call(self.run_id, call, record.summaries)
            self.calls += 1

    def close(self) -> None:
        with self._lock:
            self.store.finish_run(self.run_id, "finished", {"calls": self.calls})
            self.store.close()
