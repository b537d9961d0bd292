"""The PostgreSQL backend of the run store (psycopg 3): a team's shared store.

``postgresql://user:password@host:5432/dbname`` (libpq URL; ``PGPASSWORD`` and ``~/.pgpass`` work
too). The tables live in their own schema, ``rejoinder``, so the store can share a database with
other applications. Search uses PostgreSQL full-text search: a generated ``tsvector`` column
(``english`` configuration: stemming like SQLite's porter tokenizer; like SQLite's ``unicode61``
tokenizer, every character that is not a letter or digit separates words) with a GIN index, queried
with ``to_tsquery`` built from the same query language as the SQLite backend (words, ``"phrases"``,
``OR``, ``NOT``, ``prefix*``, parentheses) and ranked by ``ts_rank``.

Migrations: numbered scripts (:data:`MIGRATIONS`), the same versions as the SQLite backend's,
applied in one transaction under an advisory lock, so two processes opening a new database at
once migrate it once.
"""

from __future__ import annotations

import re
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterable, Iterator
from urllib.parse import urlsplit, urlunsplit

from ...errors import MissingExtra
from .base import SCHEMA_VERSION, RunStore, StoreError

SCHEMA = "rejoinder"
_LOCK_KEY = 0x72656A6F  # advisory lock of the migrations ("rejo")

_V1 = """
CREATE TABLE runs (
    seq         BIGINT GENERATED ALWAYS AS IDENTITY,
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
    seq            BIGINT GENERATED ALWAYS AS IDENTITY,
    id             TEXT PRIMARY KEY,
    run_id         TEXT NOT NULL REFERENCES runs(id),
    scenario       TEXT NOT NULL,
    scenario_hash  TEXT,
    concurrency    INTEGER NOT NULL,
    worker         INTEGER,
    round          INTEGER,
    started_at     TEXT,
    offset_ms      DOUBLE PRECISION,
    duration_ms    DOUBLE PRECISION,
    caller_cpu_s   DOUBLE PRECISION,
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
    seq          BIGINT GENERATED ALWAYS AS IDENTITY,
    call_id      TEXT NOT NULL REFERENCES calls(id),
    turn_id      INTEGER NOT NULL,
    run_id       TEXT NOT NULL,
    concurrency  INTEGER NOT NULL,
    scenario     TEXT NOT NULL,
    caller_turn  INTEGER,
    status       TEXT NOT NULL,
    v2v_ms       DOUBLE PRECISION,
    segments     TEXT NOT NULL,
    boundaries   TEXT NOT NULL,
    estimated    TEXT NOT NULL,
    stalls_n     INTEGER NOT NULL,
    stalls_ms    DOUBLE PRECISION NOT NULL,
    tools        TEXT NOT NULL,
    transcript   TEXT,
    heard_text   TEXT,
    errors       TEXT NOT NULL,
    PRIMARY KEY (call_id, turn_id)
);
CREATE INDEX turns_by_run ON turns(run_id, concurrency);
CREATE TABLE notes (
    id      BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    run_id  TEXT NOT NULL REFERENCES runs(id),
    at      TEXT NOT NULL,
    text    TEXT NOT NULL
)
"""

_V2 = """
CREATE TABLE search (
    seq      BIGINT GENERATED ALWAYS AS IDENTITY,
    run_id   TEXT NOT NULL,
    call_id  TEXT,
    kind     TEXT NOT NULL,
    text     TEXT NOT NULL,
    tsv      tsvector GENERATED ALWAYS AS
             (to_tsvector('english', regexp_replace(text, '[^[:alnum:]]+', ' ', 'g'))) STORED
);
CREATE INDEX search_tsv ON search USING GIN (tsv);
INSERT INTO search (run_id, call_id, kind, text) SELECT run_id, id, 'transcript', transcript FROM calls
    WHERE transcript <> '';
INSERT INTO search (run_id, call_id, kind, text) SELECT run_id, id, 'failure', failures FROM calls
    WHERE failures <> '[]';
INSERT INTO search (run_id, call_id, kind, text) SELECT run_id, NULL, 'note', text FROM notes;
INSERT INTO search (run_id, call_id, kind, text) SELECT id, NULL, 'conditions', conditions FROM runs
"""

# migrations[i] takes a store from version i to i + 1 (the same versions as the SQLite backend)
MIGRATIONS: tuple[str, ...] = (_V1, _V2)


def redact(url: str) -> str:
    """The URL without its password (for messages)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "postgresql://…"
    if parts.password is None:
        return url
    netloc = parts.netloc.rsplit("@", 1)
    user = (parts.username or "") + ":***"
    return urlunsplit((parts.scheme, f"{user}@{netloc[-1]}", parts.path, parts.query, parts.fragment))


def _explain(exc: Exception, where: str) -> StoreError:
    """A connection failure as an error that names the fix."""
    first = str(exc).strip().splitlines()[0].strip() if str(exc).strip() else type(exc).__name__
    text = str(exc).lower()
    if "password authentication failed" in text or "no password supplied" in text:
        fix = "check the user and password in the URL (or PGPASSWORD / ~/.pgpass)"
    elif "does not exist" in text and "database" in text:
        fix = "create the database first (createdb NAME) or name an existing one in the URL"
    elif "role" in text and "does not exist" in text:
        fix = "use an existing PostgreSQL user in the URL (postgresql://USER@host/db)"
    elif "invalid" in text or "missing" in text or "unexpected" in text:
        fix = "write the URL as postgresql://user:password@host:5432/dbname"
    else:
        fix = ("is the PostgreSQL server running and listening there? start it, fix host/port in "
               "the URL, or use a SQLite file: --store runs.sqlite")
    return StoreError(f"cannot open the PostgreSQL run store {where}: {first}; {fix}")


def to_tsquery(text: str) -> str:
    """Translate the store's query language into ``to_tsquery`` syntax.

    Words are ANDed; ``"a b"`` is a phrase (``a <-> b``); ``OR``, ``AND``, ``NOT`` (binary, as in
    FTS5: ``a NOT b``), parentheses and ``word*`` (prefix) work. Punctuation (``_`` too) splits words.

    Raises:
        StoreError: unbalanced quotes or parentheses, or an operator without an operand.
    """
    bad = StoreError(f"invalid search {text!r}: unbalanced quotes or parentheses, or an operator "
                     "without words on both sides")
    if text.count('"') % 2:
        raise bad
    parts: list[str] = []
    depth, operand = 0, False
    for m in re.finditer(r'"([^"]*)"|(\()|(\))|([^\s()"]+)', text):
        phrase, lp, rp, word = m.groups()
        if lp:
            parts.extend(["&", "("] if operand else ["("])
            depth, operand = depth + 1, False
        elif rp:
            if depth == 0 or not operand:
                raise bad
            parts.append(")")
            depth -= 1
        elif word in ("OR", "AND", "NOT"):
            if not operand:
                raise bad
            parts.append({"OR": "|", "AND": "&", "NOT": "& !"}[word])
            operand = False
        else:
            words = re.findall(r"[^\W_]+", phrase if phrase is not None else word)
            if not words:
                continue
            terms = [f"'{w}'" for w in words]
            if word is not None and word.endswith("*"):
                terms[-1] += ":*"
            term = " <-> ".join(terms)
            parts.extend(["&"] if operand else [])
            parts.append(f"({term})" if len(terms) > 1 else term)
            operand = True
    if depth or (parts and not operand):
        raise bad
    return " ".join(parts)


class PostgresStore(RunStore):
    """A run store in a PostgreSQL database (schema ``rejoinder``), created on first use.

    ``create=False`` refuses a database that holds no run store yet (read-only commands), and
    ``upto`` stops the migrations at an older schema version (tests of upgrades).

    Raises:
        MissingExtra: psycopg is not installed.
        StoreError: the URL is malformed, the server cannot be reached or refuses the login, the
            database holds no run store (``create=False``) or one from a newer version.
    """

    backend = "postgresql"
    seq = "seq"

    def __init__(self, url: str, *, create: bool = True, upto: int = SCHEMA_VERSION,
                 connect_timeout_s: int = 5) -> None:
        try:
            import psycopg
            from psycopg.rows import dict_row
        except ImportError as exc:
            raise MissingExtra("psycopg (the PostgreSQL run store)", "rejoinder[postgres]") from exc
        self.url = url
        self.where = redact(url)
        try:
            self.conn = psycopg.connect(url, autocommit=True, row_factory=dict_row,
                                        connect_timeout=connect_timeout_s)
        except (psycopg.Error, ValueError) as exc:
            raise _explain(exc, self.where) from None
        try:
            self._migrate(upto, create)
        except BaseException:
            self.conn.close()
            raise

    @property
    def artifacts_root(self) -> Path:
        import platformdirs
        return Path(platformdirs.user_data_dir("rejoinder", appauthor=False)) / "artifacts"

    # --- primitives ---------------------------------------------------------------------------
    def _rows(self, sql: str, params: Iterable[Any] = ()) -> list[dict[str, Any]]:
        return self.conn.execute(sql.replace("?", "%s"), tuple(params)).fetchall()

    def _exec(self, sql: str, params: Iterable[Any] = ()) -> None:
        self.conn.execute(sql.replace("?", "%s"), tuple(params))

    @contextmanager
    def _tx(self) -> Iterator[Any]:
        with self.conn.transaction():
            yield self.conn

    def close(self) -> None:
        self.conn.close()

    # --- schema -------------------------------------------------------------------------------
    def _version(self) -> int:
        # a catalog query (statement snapshot), not to_regclass (cached): after waiting for another
        # process's migration it must see the tables that one committed
        row = self.conn.execute("SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_tables WHERE schemaname = %s "
                                "AND tablename = 'schema_version') AS e", (SCHEMA,)).fetchone()
        if not row["e"]:
            return 0
        row = self.conn.execute(f"SELECT version FROM {SCHEMA}.schema_version").fetchone()
        return int(row["version"]) if row else 0

    def _migrate(self, upto: int, create: bool) -> None:
        version = self._version()
        if version > SCHEMA_VERSION:
            raise self._newer(version)
        if version == 0 and not create:
            raise StoreError(f"{self.where}: this database holds no rejoinder run store yet; run "
                             "`rejoinder bench --store URL` first or pass the right --store")
        if version < upto:
            with self.conn.transaction():
                self.conn.execute("SELECT pg_advisory_xact_lock(%s)", (_LOCK_KEY,))
                version = self._version()  # another process may have migrated meanwhile
                if version > SCHEMA_VERSION:
                    raise self._newer(version)
                if version == 0:
                    self.conn.execute(f"CREATE SCHEMA IF NOT EXISTS {SCHEMA}")
                    self.conn.execute(f"CREATE TABLE {SCHEMA}.schema_version (version INTEGER NOT NULL)")
                    self.conn.execute(f"INSERT INTO {SCHEMA}.schema_version VALUES (0)")
                self.conn.execute(f"SET LOCAL search_path TO {SCHEMA}")
                for v in range(version, upto):
                    for stmt in (s.strip() for s in MIGRATIONS[v].split(";")):
                        if stmt:
                            self.conn.execute(stmt)
                    self.conn.execute("UPDATE schema_version SET version = %s", (v + 1,))
        self.conn.execute(f"SET search_path TO {SCHEMA}")
        self._indexed = self._version() >= 2

    # --- search -------------------------------------------------------------------------------
    def _index(self, run_id: str, call_id: str | None, kind: str, text: str) -> None:
        if self._indexed:
            self._exec("INSERT INTO search (run_id, call_id, kind, text) VALUES (?,?,?,?)",
                       (run_id, call_id, kind, text))

    def search(self, text: str, limit: int = 50) -> list[dict[str, Any]]:
        """See :meth:`RunStore.search`."""
        if self._version() < 2:
            raise StoreError("this store has no search index; open it with a newer rejoinder")
        query = to_tsquery(text)
        if not query:
            return []
        return self.conn.execute(
            "WITH q AS (SELECT to_tsquery('english', %s) AS q) "
            "SELECT s.run_id, s.call_id, s.kind, ts_headline('english', s.text, q.q, "
            "'StartSel=[, StopSel=], MinWords=6, MaxWords=14, MaxFragments=1, FragmentDelimiter=…') AS snippet, "
            "r.started_at FROM search s CROSS JOIN q JOIN runs r ON r.id = s.run_id "
            "WHERE s.tsv @@ q.q ORDER BY ts_rank(s.tsv, q.q) DESC, s.seq LIMIT %s",
            (query, limit)).fetchall()
