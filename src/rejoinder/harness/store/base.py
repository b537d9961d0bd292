"""The run store interface, written once for both backends (SQLite, PostgreSQL).

Layout (schema version :data:`SCHEMA_VERSION`, the same logical schema in both backends)::

    runs      one row per run: status, start/end, conditions (JSON), summary (JSON)
    levels    one row per concurrency level: wall time, CPU, RSS, callers' CPU, loop lag
    calls     one row per finished call: scenario + hash, success, failure reasons, transcript
    turns     one row per agent turn: status, V2V, critical-path segments, boundaries, stalls
    notes     free-text notes on a run
    search    full-text index over transcripts, failure reasons, notes and conditions
              (SQLite FTS5; PostgreSQL tsvector + GIN)

JSON columns are text in both backends, so a run reads back the same from either.

Crash safety: the run row is written before the first call, and each call (with its turns) is
committed in one transaction the moment it finishes, so a run killed midway keeps every call
that finished. Such a run stays ``running`` with a dead pid and is shown as ``interrupted``.

Versioning: each backend has numbered migrations (``migrations[i]`` takes a store from version
``i`` to ``i + 1``) applied in order when a store is opened, under a lock so two processes never
migrate at once. A store written by a *newer* rejoinder raises :class:`StoreError` with what to do.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import socket
from abc import ABC, abstractmethod
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, ContextManager, Iterable, Iterator

from ...errors import RejoinderError

SCHEMA_VERSION = 2


class StoreError(RejoinderError):
    """The run store cannot be opened or a run cannot be found; the message says what to do."""


def now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


def dumps(obj: Any) -> str:
    return json.dumps(obj, default=str, sort_keys=True)


def loads(value: Any, default: Any = None) -> Any:
    if value is None or value == "":
        return default
    return json.loads(value) if isinstance(value, str) else value


def pid_alive(pid: int | None, host: str | None) -> bool:
    """Whether the process that writes a ``running`` run still exists (another host: assume so)."""
    if not pid:
        return False
    if host != socket.gethostname():
        return True
    import psutil
    return psutil.pid_exists(pid)


def flatten_text(obj: Any, prefix: str = "") -> str:
    """``{"a": {"b": 1}}`` → ``"a.b 1"`` lines, so conditions are searchable by key and value."""
    if isinstance(obj, dict):
        return "\n".join(flatten_text(v, f"{prefix}{k}.") for k, v in obj.items())
    if isinstance(obj, (list, tuple)):
        return "\n".join(flatten_text(v, prefix) for v in obj)
    return f"{prefix.rstrip('.')} {obj}"


_CALL_COLS = ("id", "run_id", "scenario", "scenario_hash", "concurrency", "worker", "round", "started_at",
              "offset_ms", "duration_ms", "caller_cpu_s", "success", "checks", "failures", "error",
              "transcript", "artifacts", "extra")
_TURN_COLS = ("call_id", "turn_id", "run_id", "concurrency", "scenario", "caller_turn", "status", "v2v_ms",
              "segments", "boundaries", "estimated", "stalls_n", "stalls_ms", "tools", "transcript",
              "heard_text", "errors")
_RUN_COUNTS = ("(SELECT COUNT(*) FROM calls c WHERE c.run_id = r.id) AS n_calls, "
               "(SELECT SUM(success) FROM calls c WHERE c.run_id = r.id) AS n_ok")


def _insert(table: str, cols: tuple[str, ...]) -> str:
    return f"INSERT INTO {table} ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})"


class RunStore(ABC):
    """A connection to a run store (use as a context manager or call :meth:`close`).

    Backends implement the few primitives below; SQL here uses ``?`` placeholders and ``{seq}``
    for the insertion-order column. Open one with :func:`rejoinder.harness.store.open_store`.

    Raises:
        StoreError: the store cannot be reached or opened, is not a run store, or is from a newer
            version; a run reference matches nothing or several runs.
    """

    backend: str = ""
    seq: str = "rowid"   # the column that keeps insertion order
    where: str = ""      # how messages name this store (a path, or a URL without its password)

    # --- backend primitives ---------------------------------------------------------------------
    @abstractmethod
    def _rows(self, sql: str, params: Iterable[Any] = ()) -> list[dict[str, Any]]: ...

    @abstractmethod
    def _exec(self, sql: str, params: Iterable[Any] = ()) -> None: ...

    @abstractmethod
    def _tx(self) -> ContextManager[Any]: ...

    @abstractmethod
    def _version(self) -> int: ...

    @abstractmethod
    def _index(self, run_id: str, call_id: str | None, kind: str, text: str) -> None: ...

    @abstractmethod
    def search(self, text: str, limit: int = 50) -> list[dict[str, Any]]:
        """Full-text search over transcripts, failure reasons, notes and conditions.

        Plain words are all required (``order 4217``); ``"exact phrase"``, ``OR``, ``NOT``,
        ``prefix*`` and parentheses work in both backends. Returns ``run_id``, ``call_id``,
        ``kind``, ``snippet`` (matches in ``[…]``) and ``started_at`` per hit, best first.
        Raises StoreError for an invalid query."""

    @abstractmethod
    def close(self) -> None: ...

    @property
    @abstractmethod
    def artifacts_root(self) -> Path:
        """Default folder for per-call artifacts of runs in this store."""

    # --- shared ----------------------------------------------------------------------------------
    @property
    def version(self) -> int:
        return self._version()

    def _newer(self, version: int) -> StoreError:
        return StoreError(f"{self.where}: written by a newer rejoinder (store schema v{version}; "
                          f"this version reads up to v{SCHEMA_VERSION}); upgrade rejoinder or "
                          "use another --store")

    def __enter__(self) -> "RunStore":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _one(self, sql: str, params: Iterable[Any] = ()) -> dict[str, Any] | None:
        rows = self._rows(sql, params)
        return rows[0] if rows else None

    def _q(self, sql: str) -> str:
        return sql.replace("{seq}", self.seq)

    @contextmanager
    def atomic(self) -> Iterator[None]:
        """One transaction around everything inside (nested uses join the outer one)."""
        if getattr(self, "_depth", 0):
            self._depth += 1
            try:
                yield
            finally:
                self._depth -= 1
            return
        with self._tx():
            self._depth = 1
            try:
                yield
            finally:
                self._depth = 0

    # --- writing ------------------------------------------------------------------------------
    def begin_run(self, conditions: dict[str, Any], *, suite: str = "", command: str = "",
                  run_id: str | None = None) -> str:
        """Create a run (status ``running``) and index its conditions; returns the run id."""
        run_id = run_id or datetime.now().strftime("%Y%m%d-%H%M%S-") + secrets.token_hex(2)
        self.put_run({"id": run_id, "started_at": now_iso(), "status": "running", "suite": suite,
                      "command": command, "pid": os.getpid(), "host": socket.gethostname(),
                      "conditions": conditions})
        return run_id

    def put_run(self, run: dict[str, Any]) -> None:
        """Insert a run row as given (``conditions``/``summary`` as objects) and index it."""
        cols = ("id", "started_at", "ended_at", "status", "suite", "command", "pid", "host",
                "conditions", "summary")
        row = {**run, "conditions": dumps(run.get("conditions") or {}),
               "summary": dumps(run["summary"]) if run.get("summary") is not None else None}
        with self.atomic():
            self._exec(_insert("runs", cols), [row.get(c) for c in cols])
            self._index(run["id"], None, "conditions", flatten_text(run.get("conditions") or {}))

    def add_call(self, run_id: str, call: dict[str, Any], turns: Iterable[dict[str, Any]]) -> None:
        """Record one finished call and its turns in one transaction (durable when it returns)."""
        row = {**call, "run_id": run_id, "success": int(bool(call["success"])),
               "failures": dumps(call.get("failures", [])), "extra": dumps(call.get("extra", {})),
               "transcript": call.get("transcript", "")}
        with self.atomic():
            self._exec(_insert("calls", _CALL_COLS), [row.get(c) for c in _CALL_COLS])
            for t in turns:
                stalls = t.get("stalls", [])
                trow = {**t, "call_id": call["id"], "run_id": run_id, "concurrency": call["concurrency"],
                        "scenario": call["scenario"], "segments": dumps(t.get("segments", {})),
                        "boundaries": dumps(t.get("boundaries", {})),
                        "estimated": dumps(t.get("estimated", [])),
                        "stalls_n": t.get("stalls_n", len(stalls)),
                        "stalls_ms": t.get("stalls_ms", float(sum(s["duration_ms"] for s in stalls))),
                        "tools": dumps(t.get("tools", [])), "transcript": t.get("transcript", ""),
                        "heard_text": t.get("heard_text", ""), "errors": dumps(t.get("errors", []))}
                self._exec(_insert("turns", _TURN_COLS), [trow.get(c) for c in _TURN_COLS])
            if call.get("transcript"):
                self._index(run_id, call["id"], "transcript", f"{call['scenario']}\n{call['transcript']}")
            if call.get("failures") or call.get("error"):
                text = "\n".join(call.get("failures", []) + ([call["error"]] if call.get("error") else []))
                self._index(run_id, call["id"], "failure", f"{call['scenario']}: {text}")

    def add_level(self, run_id: str, concurrency: int, stats: dict[str, Any],
                  started_at: str | None = None) -> None:
        with self.atomic():
            self._exec("INSERT INTO levels (run_id, concurrency, started_at, stats) VALUES (?,?,?,?) "
                       "ON CONFLICT (run_id, concurrency) DO UPDATE SET started_at = excluded.started_at, "
                       "stats = excluded.stats", (run_id, concurrency, started_at or now_iso(), dumps(stats)))

    def finish_run(self, run_id: str, status: str, summary: dict[str, Any] | None = None) -> None:
        with self.atomic():
            self._exec("UPDATE runs SET status = ?, ended_at = ?, summary = ? WHERE id = ?",
                       (status, now_iso(), dumps(summary) if summary is not None else None, run_id))

    def add_note(self, run_id: str, text: str, at: str | None = None) -> None:
        run_id = self.resolve(run_id)
        with self.atomic():
            self._exec("INSERT INTO notes (run_id, at, text) VALUES (?,?,?)", (run_id, at or now_iso(), text))
            self._index(run_id, None, "note", text)

    # --- reading ------------------------------------------------------------------------------
    def resolve(self, ref: str) -> str:
        """A run id from an id, a unique prefix, or ``last`` / ``last~N`` (N runs before the last)."""
        m = re.fullmatch(r"(?:last|latest)(?:~(\d+))?", ref.strip())
        if m:
            row = self._one(self._q("SELECT id FROM runs ORDER BY started_at DESC, {seq} DESC "
                                    "LIMIT 1 OFFSET ?"), (int(m.group(1) or 0),))
            if row is None:
                raise StoreError(f"{self.where}: no such run: {ref} (the store has fewer runs)")
            return row["id"]
        prefix = re.sub(r"([%_\\])", r"\\\1", ref) + "%"
        rows = self._rows("SELECT id FROM runs WHERE id = ? OR id LIKE ? ESCAPE '\\' ORDER BY id", (ref, prefix))
        ids = [r["id"] for r in rows]
        if ref in ids:
            return ref
        if len(ids) == 1:
            return ids[0]
        if not ids:
            raise StoreError(f"{self.where}: no run matches {ref!r}; see `rejoinder runs list`")
        raise StoreError(f"{ref!r} is ambiguous: {', '.join(ids[:5])}")

    def runs(self, limit: int = 50) -> list[dict[str, Any]]:
        rows = self._rows(self._q(f"SELECT r.*, {_RUN_COUNTS} FROM runs r "
                                  "ORDER BY started_at DESC, {seq} DESC LIMIT ?"), (limit,))
        return [self._run_dict(r) for r in rows]

    def run_ids(self) -> list[str]:
        """Every run id, oldest first."""
        return [r["id"] for r in self._rows(self._q("SELECT id FROM runs ORDER BY started_at, {seq}"))]

    def run(self, ref: str) -> dict[str, Any]:
        run_id = self.resolve(ref)
        row = self._one(f"SELECT r.*, {_RUN_COUNTS} FROM runs r WHERE id = ?", (run_id,))
        out = self._run_dict(row)
        out["notes"] = self._rows("SELECT at, text FROM notes WHERE run_id = ? ORDER BY id", (run_id,))
        out["levels"] = {r["concurrency"]: loads(r["stats"]) for r in self._rows(
            "SELECT concurrency, stats FROM levels WHERE run_id = ? ORDER BY concurrency", (run_id,))}
        return out

    def levels(self, run_id: str) -> list[dict[str, Any]]:
        """The raw level rows of a run (``stats`` decoded)."""
        rows = self._rows("SELECT concurrency, started_at, stats FROM levels WHERE run_id = ? "
                          "ORDER BY concurrency", (run_id,))
        return [{**r, "stats": loads(r["stats"])} for r in rows]

    def _run_dict(self, r: dict[str, Any]) -> dict[str, Any]:
        d = {k: v for k, v in r.items() if k != "seq"}
        d["conditions"] = loads(d.get("conditions"), {})
        d["summary"] = loads(d.get("summary"))
        d["n_calls"] = int(d.get("n_calls") or 0)
        d["n_ok"] = None if d.get("n_ok") is None else int(d["n_ok"])
        if d["status"] == "running" and not pid_alive(d.get("pid"), d.get("host")):
            d["status"] = "interrupted"
        return d

    def calls(self, run_id: str) -> list[dict[str, Any]]:
        rows = self._rows(self._q("SELECT * FROM calls WHERE run_id = ? ORDER BY concurrency, {seq}"), (run_id,))
        out = []
        for r in rows:
            d = {k: v for k, v in r.items() if k != "seq"}
            d["failures"] = loads(d["failures"], [])
            d["extra"] = loads(d.get("extra"), {})
            d["success"] = bool(d["success"])
            out.append(d)
        return out

    def turns(self, run_id: str) -> list[dict[str, Any]]:
        rows = self._rows(self._q("SELECT * FROM turns WHERE run_id = ? ORDER BY concurrency, {seq}"), (run_id,))
        out = []
        for r in rows:
            d = {k: v for k, v in r.items() if k != "seq"}
            for k in ("segments", "boundaries", "estimated", "tools", "errors"):
                d[k] = loads(d[k])
            out.append(d)
        return out
