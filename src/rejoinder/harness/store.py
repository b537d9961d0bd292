"""The run store: one SQLite file (WAL) holding every benchmark run, its calls and turns.

Layout (schema version :data:`SCHEMA_VERSION`, kept in table ``schema_version``)::

    runs      one row per run: status, start/end, conditions (JSON), summary (JSON)
    levels    one row per concurrency level: wall time, CPU, RSS, callers' CPU, loop lag
    calls     one row per finished call: scenario + hash, success, failure reasons, transcript
    turns     one row per agent turn: status, V2V, critical-path segments, boundaries, stalls
    notes     free-text notes on a run
    search    FTS5 index over transcripts, failure reasons, notes and conditions

Crash safety: the run row is written before the first call, and each call (with its turns) is
committed in one transaction the moment it finishes, so a run killed midway keeps every call
that finished. Such a run stays ``running`` with a dead pid and is shown as ``interrupted``.

Versioning: opening a store applies the missing migrations in order (:data:`MIGRATIONS`). A store
written by a *newer* rejoinder, or a file that is not a run store, raises :class:`StoreError`
with what to do.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import socket
import sqlite3
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterable

from ..errors import RejoinderError
from ..recording import transaction

SCHEMA_VERSION = 2

_V1 = """
CREATE TABLE runs (
    id          TEXT PRIMARY KEY,
    started_at  TEXT NOT NULL,
    ended_at    TEXT,
    status      TEXT NOT NULL,
    suite       TEXT,
    command     TEXT,
    pid         INTEGER,
    host        TEXT,
    conditions  TEXT NOT NULL,
    summary     TEXT
);
CREATE TABLE levels (
    run_id       TEXT NOT NULL REFERENCES runs(id),
    concurrency  INTEGER NOT NULL,
    started_at   TEXT,
    stats        TEXT NOT NULL,
    PRIMARY KEY (run_id, concurrency)
);
CREATE TABLE calls (
    id             TEXT PRIMARY KEY,
    run_id         TEXT NOT NULL REFERENCES runs(id),
    scenario       TEXT NOT NULL,
    scenario_hash  TEXT,
    concurrency    INTEGER NOT NULL,
    worker         INTEGER,
    round          INTEGER,
    started_at     TEXT,
    offset_ms      REAL,
    duration_ms    REAL,
    caller_cpu_s   REAL,
    success        INTEGER NOT NULL,
    checks         INTEGER,
    failures       TEXT NOT NULL,
    error          TEXT,
    transcript     TEXT,
    artifacts      TEXT,
    extra          TEXT
);
CREATE INDEX calls_by_run ON calls(run_id, concurrency);
CREATE TABLE turns (
    call_id      TEXT NOT NULL REFERENCES calls(id),
    turn_id      INTEGER NOT NULL,
    run_id       TEXT NOT NULL,
    concurrency  INTEGER NOT NULL,
    scenario     TEXT NOT NULL,
    caller_turn  INTEGER,
    status       TEXT NOT NULL,
    v2v_ms       REAL,
    segments     TEXT NOT NULL,
    boundaries   TEXT NOT NULL,
    estimated    TEXT NOT NULL,
    stalls_n     INTEGER NOT NULL,
    stalls_ms    REAL NOT NULL,
    tools        TEXT NOT NULL,
    transcript   TEXT,
    heard_text   TEXT,
    errors       TEXT NOT NULL,
    PRIMARY KEY (call_id, turn_id)
);
CREATE INDEX turns_by_run ON turns(run_id, concurrency);
CREATE TABLE notes (
    id      INTEGER PRIMARY KEY,
    run_id  TEXT NOT NULL REFERENCES runs(id),
    at      TEXT NOT NULL,
    text    TEXT NOT NULL
);
"""

_V2 = """
CREATE VIRTUAL TABLE search USING fts5(run_id UNINDEXED, call_id UNINDEXED, kind, text,
                                       tokenize = 'porter unicode61');
INSERT INTO search (run_id, call_id, kind, text) SELECT run_id, id, 'transcript', transcript FROM calls
    WHERE transcript <> '';
INSERT INTO search (run_id, call_id, kind, text) SELECT run_id, id, 'failure', failures FROM calls
    WHERE failures <> '[]';
INSERT INTO search (run_id, call_id, kind, text) SELECT run_id, NULL, 'note', text FROM notes;
INSERT INTO search (run_id, call_id, kind, text) SELECT id, NULL, 'conditions', conditions FROM runs;
"""

# migrations[i] takes a store from version i to i + 1
MIGRATIONS: tuple[str, ...] = (_V1, _V2)


class StoreError(RejoinderError):
    """The run store cannot be opened or a run cannot be found; the message says what to do."""


def default_store_path() -> Path:
    """``$REJOINDER_STORE``, else ``runs.sqlite`` in the user data directory (platformdirs)."""
    env = os.environ.get("REJOINDER_STORE")
    if env:
        return Path(env).expanduser()
    import platformdirs
    return Path(platformdirs.user_data_dir("rejoinder", appauthor=False)) / "runs.sqlite"


def now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


def _dumps(obj: Any) -> str:
    return json.dumps(obj, default=str, sort_keys=True)


def _pid_alive(pid: int | None, host: str | None) -> bool:
    """Whether the process that writes a ``running`` run still exists (another host: assume so)."""
    if not pid:
        return False
    if host != socket.gethostname():
        return True
    import psutil
    return psutil.pid_exists(pid)


class RunStore:
    """A connection to a run store file. Use as a context manager or call :meth:`close`.

    Raises:
        StoreError: the file is not a run store, is from a newer version, or cannot be created.
    """

    def __init__(self, path: str | Path | None = None, *, upto: int = SCHEMA_VERSION) -> None:
        self.path = Path(path) if path is not None else default_store_path()
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.conn = sqlite3.connect(str(self.path), isolation_level=None, timeout=10.0,
                                        check_same_thread=False)
            self.conn.row_factory = sqlite3.Row
            self.conn.execute("PRAGMA journal_mode = WAL")
            self.conn.execute("PRAGMA synchronous = NORMAL")
            self.conn.execute("PRAGMA foreign_keys = ON")
            self._migrate(upto)
        except sqlite3.DatabaseError as exc:
            raise StoreError(f"{self.path}: not a rejoinder run store ({exc}); "
                             "point --store / REJOINDER_STORE at another file") from exc

    # --- schema -------------------------------------------------------------------------------
    def _version(self) -> int:
        tables = {r[0] for r in self.conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        if "schema_version" not in tables:
            if tables:
                raise StoreError(f"{self.path}: this SQLite file is not a rejoinder run store "
                                 f"(tables: {', '.join(sorted(tables))}); use another --store")
            return 0
        row = self.conn.execute("SELECT version FROM schema_version").fetchone()
        return int(row[0]) if row else 0

    def _migrate(self, upto: int) -> None:
        version = self._version()
        if version > SCHEMA_VERSION:
            raise StoreError(f"{self.path}: written by a newer rejoinder (store schema v{version}; "
                             f"this version reads up to v{SCHEMA_VERSION}); upgrade rejoinder or "
                             "use another --store")
        if version >= upto:
            return
        self.conn.execute("BEGIN IMMEDIATE")
        try:
            version = self._version()  # another process may have migrated meanwhile
            if version == 0:
                self.conn.execute("CREATE TABLE schema_version (version INTEGER NOT NULL)")
                self.conn.execute("INSERT INTO schema_version VALUES (0)")
            for v in range(version, upto):
                for stmt in _statements(MIGRATIONS[v]):
                    self.conn.execute(stmt)
                self.conn.execute("UPDATE schema_version SET version = ?", (v + 1,))
            self.conn.execute("COMMIT")
        except BaseException:
            self.conn.execute("ROLLBACK")
            raise

    @property
    def version(self) -> int:
        return self._version()

    def close(self) -> None:
        self.conn.close()

    def __enter__(self) -> "RunStore":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # --- writing ------------------------------------------------------------------------------
    def begin_run(self, conditions: dict[str, Any], *, suite: str = "", command: str = "",
                  run_id: str | None = None) -> str:
        """Create a run (status ``running``) and index its conditions; returns the run id."""
        run_id = run_id or datetime.now().strftime("%Y%m%d-%H%M%S-") + secrets.token_hex(2)
        with self._tx():
            self.conn.execute(
                "INSERT INTO runs (id, started_at, status, suite, command, pid, host, conditions) "
                "VALUES (?,?,?,?,?,?,?,?)",
                (run_id, now_iso(), "running", suite, command, os.getpid(), socket.gethostname(),
                 _dumps(conditions)))
            self._index(run_id, None, "conditions", _flatten_text(conditions))
        return run_id

    def add_call(self, run_id: str, call: dict[str, Any], turns: Iterable[dict[str, Any]]) -> None:
        """Record one finished call and its turns in one transaction (durable when it returns)."""
        with self._tx():
            self.conn.execute(
                "INSERT INTO calls (id, run_id, scenario, scenario_hash, concurrency, worker, round, "
                "started_at, offset_ms, duration_ms, caller_cpu_s, success, checks, failures, error, "
                "transcript, artifacts, extra) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                (call["id"], run_id, call["scenario"], call.get("scenario_hash"), call["concurrency"],
                 call.get("worker"), call.get("round"), call.get("started_at"), call.get("offset_ms"),
                 call.get("duration_ms"), call.get("caller_cpu_s"), int(bool(call["success"])),
                 call.get("checks"), _dumps(call.get("failures", [])), call.get("error"),
                 call.get("transcript", ""), call.get("artifacts"), _dumps(call.get("extra", {}))))
            for t in turns:
                stalls = t.get("stalls", [])
                self.conn.execute(
                    "INSERT INTO turns VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                    (call["id"], t["turn_id"], run_id, call["concurrency"], call["scenario"],
                     t.get("caller_turn"), t["status"], t.get("v2v_ms"), _dumps(t.get("segments", {})),
                     _dumps(t.get("boundaries", {})), _dumps(t.get("estimated", [])), len(stalls),
                     float(sum(s["duration_ms"] for s in stalls)), _dumps(t.get("tools", [])),
                     t.get("transcript", ""), t.get("heard_text", ""), _dumps(t.get("errors", []))))
            if call.get("transcript"):
                self._index(run_id, call["id"], "transcript", f"{call['scenario']}\n{call['transcript']}")
            if call.get("failures") or call.get("error"):
                text = "\n".join(call.get("failures", []) + ([call["error"]] if call.get("error") else []))
                self._index(run_id, call["id"], "failure", f"{call['scenario']}: {text}")

    def add_level(self, run_id: str, concurrency: int, stats: dict[str, Any]) -> None:
        with self._tx():
            self.conn.execute("INSERT OR REPLACE INTO levels VALUES (?,?,?,?)",
                              (run_id, concurrency, now_iso(), _dumps(stats)))

    def finish_run(self, run_id: str, status: str, summary: dict[str, Any] | None = None) -> None:
        with self._tx():
            self.conn.execute("UPDATE runs SET status = ?, ended_at = ?, summary = ? WHERE id = ?",
                              (status, now_iso(), _dumps(summary) if summary is not None else None, run_id))

    def add_note(self, run_id: str, text: str) -> None:
        run_id = self.resolve(run_id)
        with self._tx():
            self.conn.execute("INSERT INTO notes (run_id, at, text) VALUES (?,?,?)", (run_id, now_iso(), text))
            self._index(run_id, None, "note", text)

    def _index(self, run_id: str, call_id: str | None, kind: str, text: str) -> None:
        if self._version() >= 2:
            self.conn.execute("INSERT INTO search (run_id, call_id, kind, text) VALUES (?,?,?,?)",
                              (run_id, call_id, kind, text))

    def _tx(self):
        return transaction(self.conn)

    # --- reading ------------------------------------------------------------------------------
    def resolve(self, ref: str) -> str:
        """A run id from an id, a unique prefix, or ``last`` / ``last~N`` (N runs before the last)."""
        m = re.fullmatch(r"(?:last|latest)(?:~(\d+))?", ref.strip())
        if m:
            row = self.conn.execute("SELECT id FROM runs ORDER BY started_at DESC, rowid DESC "
                                    "LIMIT 1 OFFSET ?", (int(m.group(1) or 0),)).fetchone()
            if row is None:
                raise StoreError(f"{self.path}: no such run: {ref} (the store has fewer runs)")
            return row[0]
        rows = self.conn.execute("SELECT id FROM runs WHERE id = ? OR id LIKE ? ORDER BY id",
                                 (ref, ref.replace("%", "") + "%")).fetchall()
        exact = [r[0] for r in rows if r[0] == ref]
        if exact:
            return exact[0]
        if len(rows) == 1:
            return rows[0][0]
        if not rows:
            raise StoreError(f"{self.path}: no run matches {ref!r}; see `rejoinder runs list`")
        raise StoreError(f"{ref!r} is ambiguous: {', '.join(r[0] for r in rows[:5])}")

    def runs(self, limit: int = 50) -> list[dict[str, Any]]:
        rows = self.conn.execute(
            "SELECT r.*, (SELECT COUNT(*) FROM calls c WHERE c.run_id = r.id) AS n_calls, "
            "(SELECT SUM(success) FROM calls c WHERE c.run_id = r.id) AS n_ok "
            "FROM runs r ORDER BY started_at DESC, rowid DESC LIMIT ?", (limit,)).fetchall()
        return [self._run_dict(r) for r in rows]

    def run(self, ref: str) -> dict[str, Any]:
        run_id = self.resolve(ref)
        row = self.conn.execute(
            "SELECT r.*, (SELECT COUNT(*) FROM calls c WHERE c.run_id = r.id) AS n_calls, "
            "(SELECT SUM(success) FROM calls c WHERE c.run_id = r.id) AS n_ok FROM runs r WHERE id = ?",
            (run_id,)).fetchone()
        out = self._run_dict(row)
        out["notes"] = [dict(r) for r in self.conn.execute(
            "SELECT at, text FROM notes WHERE run_id = ? ORDER BY id", (run_id,))]
        out["levels"] = {r["concurrency"]: json.loads(r["stats"]) for r in self.conn.execute(
            "SELECT concurrency, stats FROM levels WHERE run_id = ? ORDER BY concurrency", (run_id,))}
        return out

    def _run_dict(self, r: sqlite3.Row) -> dict[str, Any]:
        d = dict(r)
        d["conditions"] = json.loads(d["conditions"]) if d.get("conditions") else {}
        d["summary"] = json.loads(d["summary"]) if d.get("summary") else None
        if d["status"] == "running" and not _pid_alive(d.get("pid"), d.get("host")):
            d["status"] = "interrupted"
        return d

    def calls(self, run_id: str) -> list[dict[str, Any]]:
        rows = self.conn.execute("SELECT * FROM calls WHERE run_id = ? ORDER BY concurrency, rowid",
                                 (run_id,)).fetchall()
        out = []
        for r in rows:
            d = dict(r)
            d["failures"] = json.loads(d["failures"])
            d["extra"] = json.loads(d["extra"]) if d.get("extra") else {}
            d["success"] = bool(d["success"])
            out.append(d)
        return out

    def turns(self, run_id: str) -> list[dict[str, Any]]:
        rows = self.conn.execute("SELECT * FROM turns WHERE run_id = ? ORDER BY concurrency, rowid",
                                 (run_id,)).fetchall()
        out = []
        for r in rows:
            d = dict(r)
            for k in ("segments", "boundaries", "estimated", "tools", "errors"):
                d[k] = json.loads(d[k])
            out.append(d)
        return out

    def search(self, text: str, limit: int = 50) -> list[dict[str, Any]]:
        """Full-text search over transcripts, failure reasons, notes and conditions.

        Plain words are all required (``order 4217``); FTS5 syntax (``"exact phrase"``, ``OR``,
        ``NOT``, ``prefix*``) is passed through. Raises StoreError for an invalid query.
        """
        if self._version() < 2:
            raise StoreError("this store has no search index; open it with a newer rejoinder")
        query = text if re.search(r'["*()]|\b(AND|OR|NOT|NEAR)\b', text) else " ".join(
            '"' + w.replace('"', '') + '"' for w in text.split())
        if not query.strip():
            return []
        try:
            rows = self.conn.execute(
                "SELECT s.run_id, s.call_id, s.kind, snippet(search, 3, '[', ']', '…', 12) AS snippet, "
                "r.started_at FROM search s JOIN runs r ON r.id = s.run_id WHERE search MATCH ? "
                "ORDER BY rank LIMIT ?", (query, limit)).fetchall()
        except sqlite3.OperationalError as exc:
            raise StoreError(f"invalid search {text!r}: {exc}") from exc
        return [dict(r) for r in rows]


def _statements(script: str) -> list[str]:
    """Split a migration script into statements (no semicolons inside our literals)."""
    return [s.strip() for s in script.split(";") if s.strip()]


def _flatten_text(obj: Any, prefix: str = "") -> str:
    """``{"a": {"b": 1}}`` → ``"a.b 1"`` lines, so conditions are searchable by key and value."""
    if isinstance(obj, dict):
        return "\n".join(_flatten_text(v, f"{prefix}{k}.") for k, v in obj.items())
    if isinstance(obj, (list, tuple)):
        return "\n".join(_flatten_text(v, prefix) for v in obj)
    return f"{prefix.rstrip('.')} {obj}"
