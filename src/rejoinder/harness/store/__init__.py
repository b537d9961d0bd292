"""The run store: every benchmark run, its calls and turns, in SQLite (one file, the default) or
PostgreSQL (a team's shared store) — one interface (:class:`RunStore`), two backends.

:func:`open_store` picks the backend from ``--store`` / ``REJOINDER_STORE``: a file path (or
``sqlite:///path``) is SQLite, ``postgresql://user:password@host:5432/dbname`` is PostgreSQL.
:mod:`.transfer` moves runs between stores (``rejoinder runs export | import``).

Why numbered migrations per backend and not Alembic: the schema is five tables, each backend
needs its own DDL for search anyway (FTS5 vs tsvector), existing SQLite stores already carry a
``schema_version`` number that must keep opening, and a store compares one integer with
:data:`SCHEMA_VERSION` to refuse a newer schema with a clear error.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from .base import SCHEMA_VERSION, RunStore, StoreError, flatten_text, now_iso
from .sqlite import SQLiteStore

__all__ = ["SCHEMA_VERSION", "RunStore", "SQLiteStore", "StoreError", "open_store", "default_store_path",
           "default_store_target", "is_postgres_url", "now_iso", "flatten_text"]

_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*):(//)?")


def default_store_path() -> Path:
    """The default SQLite file: ``runs.sqlite`` in the user data directory (platformdirs), or
    ``$REJOINDER_STORE`` when that is a path."""
    env = os.environ.get("REJOINDER_STORE")
    if env and not _SCHEME.match(env):
        return Path(env).expanduser()
    import platformdirs
    return Path(platformdirs.user_data_dir("rejoinder", appauthor=False)) / "runs.sqlite"


def default_store_target() -> str:
    """``$REJOINDER_STORE`` (a path or URL), else the default SQLite file."""
    return os.environ.get("REJOINDER_STORE") or str(default_store_path())


def is_postgres_url(target: str) -> bool:
    return target.startswith(("postgresql://", "postgres://"))


def open_store(target: str | Path | None = None, *, create: bool = True) -> RunStore:
    """Open (and migrate) the run store at ``target`` (default: :func:`default_store_target`).

    ``create=False`` is for read-only commands: a store that does not exist yet is an error
    instead of a new empty one.

    Raises:
        StoreError: unknown URL scheme, missing store (``create=False``), unreachable server,
            not a run store, or a store written by a newer rejoinder.
        MissingExtra: a PostgreSQL URL without psycopg installed.
    """
    text = str(target) if target is not None else default_store_target()
    if is_postgres_url(text):
        from .postgres import PostgresStore
        return PostgresStore(text, create=create)
    m = _SCHEME.match(text)
    if m and text.startswith("sqlite:"):
        text = text[len("sqlite:///"):] if text.startswith("sqlite:///") else text[len("sqlite:"):]
    elif m and len(m.group(1)) > 1:  # a URL, not a Windows drive letter
        from .postgres import redact
        if m.group(1).lower().startswith("postgres"):
            raise StoreError(f"malformed PostgreSQL URL {redact(text)!r}; write it as "
                             "postgresql://user:password@host:5432/dbname")
        raise StoreError(f"unknown run store URL {redact(text)!r} (scheme {m.group(1)!r}); use a file path "
                         "(SQLite) or postgresql://user:password@host:5432/dbname")
    path = Path(text).expanduser()
    if not create and not path.exists():
        raise StoreError(f"no run store at {path}; run `rejoinder bench` first or pass the right --store")
    return SQLiteStore(path)
