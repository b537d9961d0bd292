"""The SQLite backend of the run store: one file (WAL), FTS5 search, numbered migrations.

Two processes may write one file at once: every write is one ``BEGIN IMMEDIATE`` transaction and
waits (up to 10 s) for the other's lock. See :mod:`.base` for the layout and the guarantees.
"""

from __future__ import annotations

import re
import sqlite3
import time
from pathlib import Path
from typing import Any, Iterable

from ...recording import transaction
from .base import SCHEMA_VERSION, RunStore, StoreError

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



def _wal(conn: sqlite3.Connection, timeout_s: float) -> None:
    """``PRAGMA journal_mode = WAL``, retried for up to ``timeout_s`` while another process holds
    the lock: switching a new database to WAL needs it exclusively and SQLite may answer
    "database is locked" at once instead of waiting (seen with two bench processes opening a new
    store at the same moment on a loaded box).

    Raises:
        sqlite3.OperationalError: still locked after ``timeout_s``, or another error."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            conn.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() >= deadline:
                raise
            time.sleep(0.05)

class SQLiteStore(RunStore):
    """A run store file (created with its folder when missing).

    ``upto`` stops the migrations at an older schema version (tests of upgrades).

    Raises:
        StoreError: the file is not a run store, is from a newer version, or cannot be created.
    """

    backend = "sqlite"
    seq = "rowid"

    def __init__(self, path: str | Path, *, upto: int = SCHEMA_VERSION) -> None:
        self.path = Path(path)
        self.where = str(self.path)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.conn = sqlite3.connect(str(self.path), isolation_level=None, timeout=10.0,
                                        check_same_thread=False)
            self.conn.row_factory = sqlite3.Row
            _wal(self.conn, 10.0)
            self.conn.execute("PRAGMA synchronous = NORMAL")
            self.conn.execute("PRAGMA foreign_keys = ON")
            self._migrate(upto)
        except sqlite3.DatabaseError as exc:
            raise StoreError(f"{self.path}: not a rejoinder run store ({exc}); "
                             "point --store / REJOINDER_STORE at another file") from exc
        except OSError as exc:
            raise StoreError(f"{self.path}: cannot create the run store ({exc}); "
                             "point --store / REJOINDER_STORE at a writable place") from exc

    @property
    def artifacts_root(self) -> Path:
        return self.path.parent / "artifacts"

    # --- primitives ---------------------------------------------------------------------------
    def _rows(self, sql: str, params: Iterable[Any] = ()) -> list[dict[str, Any]]:
        return [dict(r) for r in self.conn.execute(sql, tuple(params)).fetchall()]

    def _exec(self, sql: str, params: Iterable[Any] = ()) -> None:
        self.conn.execute(sql, tuple(params))

    def _tx(self):
        return transaction(self.conn)

    def close(self) -> None:
        self.conn.close()

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
            raise self._newer(version)
        if version >= upto:
            return
        self.conn.execute("BEGIN IMMEDIATE")
        try:
            version = self._version()  # another process may have migrated meanwhile
            if version == 0:
                self.conn.execute("CREATE TABLE schema_version (version INTEGER NOT NULL)")
                self.conn.execute("INSERT INTO schema_version VALUES (0)")
            for v in range(version, upto):
                for stmt in statements(MIGRATIONS[v]):
                    self.conn.execute(stmt)
                self.conn.execute("UPDATE schema_version SET version = ?", (v + 1,))
            self.conn.execute("COMMIT")
        except BaseException:
            self.conn.execute("ROLLBACK")
            raise

    # --- search -------------------------------------------------------------------------------
    def _index(self, run_id: str, call_id: str | None, kind: str, text: str) -> None:
        if self._version() >= 2:
            self.conn.execute("INSERT INTO search (run_id, call_id, kind, text) VALUES (?,?,?,?)",
                              (run_id, call_id, kind, text))

    def search(self, text: str, limit: int = 50) -> list[dict[str, Any]]:
        """See :meth:`RunStore.search`; FTS5 syntax (``NEAR`` too) passes through."""
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


def statements(script: str) -> list[str]:
    """Split a migration script into statements (no semicolons inside our literals)."""
    return [s.strip() for s in script.split(";") if s.strip()]
