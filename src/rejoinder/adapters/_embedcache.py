"""The embeddings of an agent's *examples*, kept on disk between processes.

The nearest-example tool chooser (:mod:`._which`) embeds every example of every tool and of small
talk when an agent is warmed up: one forward pass each of the embedding GGUF. With the reference
support agent's 150 examples that is ≈ 13 s of a 2-core CPU at every process start (SmolLM2-135M,
≈ 85 ms an example, ``py-spy`` profile of ``rejoinder bench --scenarios order-digits-real``,
2026-12-06), paid again by each ``rejoinder bench``, ``serve`` and ``calibrate`` although
the vectors never change. :class:`CachedEmbedding` keeps them in a ``diskcache`` store keyed by
the embedding model's identity (resolved path, size, modification time), the llama.cpp thread
count and the library version (both can change the last bits of a vector) and the exact text,
so a cached vector is the one the model would compute again. Vectors are written as ``.npy``
bytes (never pickled) and read back with ``allow_pickle=False``, through a diskcache storage that
never unpickles (a pickled entry reads as a miss): anyone able to write the cache directory can make
the examples be embedded again, never run code. An entry of any other form, or a damaged one, is
embedded again.

Only examples are cached (:meth:`CachedEmbedding.examples`): a caller's words are embedded by
:meth:`CachedEmbedding.__call__` and never written anywhere. The store is
``<user cache dir>/rejoinder/embeddings`` (platformdirs), or ``$REJOINDER_EMBED_CACHE``;
``REJOINDER_EMBED_CACHE=off`` turns it off. A store that cannot be opened or read (read-only
home, a corrupt file) is logged once and the vectors are computed as without it.
"""

from __future__ import annotations

import hashlib
import io
import logging
import os
import sqlite3
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

log = logging.getLogger("rejoinder.embedcache")
ENV = "REJOINDER_EMBED_CACHE"


def default_directory() -> Path | None:
    """Where the cache lives: ``$REJOINDER_EMBED_CACHE`` (``off``: nowhere, None), else
    ``embeddings`` in the platform's user cache directory for ``rejoinder``."""
    value = os.environ.get(ENV, "").strip()
    if value.lower() in ("off", "0", "false", "no"):
        return None
    if value:
        return Path(value).expanduser()
    import platformdirs
    return Path(platformdirs.user_cache_dir("rejoinder", appauthor=False)) / "embeddings"


def model_identity(path: Path, *extra: object) -> str:
    """A string that changes whenever ``path``'s file (resolved, size, mtime in ns) or any of
    ``extra`` (thread count, library version) does.

    Raises:
        OSError: ``path`` cannot be stat'ed."""
    real = Path(path).resolve()
    st = real.stat()
    return "|".join(str(x) for x in (real, st.st_size, st.st_mtime_ns, *extra))


class CachedEmbedding:
    """A sentence-embedding function ``text -> 1-D float vector`` (``embed``, blocking) whose
    results for examples are kept on disk.

    Args:
        embed: the model's embedding function (one text, one forward pass).
        identity: the model's identity (:func:`model_identity`); part of every key.
        directory: the diskcache directory (None: :func:`default_directory`; a missing or
            unusable one: no caching).
    """

    def __init__(self, embed: Callable[[str], Any], identity: str,
                 directory: Path | None = None) -> None:
        self._embed = embed
        self._identity = identity
        self._directory = directory if directory is not None else default_directory()
        self._store: Any = None
        self._failed = self._directory is None
        #: examples embedded by the model / taken from the store, since this object was made
        self.computed = 0
        self.reused = 0

    def __call__(self, text: str) -> Any:
        """``text``'s embedding, computed (a caller's words: never stored)."""
        return self._embed(text)

    def _key(self, text: str) -> str:
        return hashlib.sha256(f"{self._identity}\x00{text}".encode("utf-8")).hexdigest()

    def _open(self) -> Any:
        if self._store is None and not self._failed:
            assert self._directory is not None
            if self._directory.exists() and not self._directory.is_dir():
                self._fail("open", NotADirectoryError(f"{self._directory} is a file, not a "
                                                      "directory"))
                return None
            try:
                import diskcache
                self._store = diskcache.Cache(str(self._directory), size_limit=256 << 20,
                                              disk=_no_pickle_disk())
            except Exception as exc:  # noqa: BLE001 — a cache is a nicety: compute instead
                self._fail("open", exc)
        return self._store

    def _fail(self, what: str, exc: BaseException) -> None:
        damaged = isinstance(exc, sqlite3.DatabaseError) and "not a database" in str(exc)
        fix = (f"Its database is damaged: delete {self._directory} (it holds only this cache)"
               if damaged else f"Set {ENV} to a writable directory")
        log.warning("embedding cache at %s: could not %s it (%r); examples are embedded at every "
                    "start. %s, or set %s to 'off'.", self._directory, what, exc, fix, ENV)
        self._failed, self._store = True, None

    def examples(self, texts: Sequence[str]) -> list[np.ndarray]:
        """The embeddings of ``texts`` (an agent's examples, already in the embedding template),
        from the store where it has them, else computed and stored; float32, one per text."""
        store = self._open()
        keys = [self._key(t) for t in texts]
        found: list[Any] = [None] * len(texts)
        if store is not None:
            try:
                found = [store.get(k) for k in keys]
            except Exception as exc:  # noqa: BLE001
                self._fail("read", exc)
                found = [None] * len(texts)
        out: list[np.ndarray] = []
        fresh: dict[str, np.ndarray] = {}
        for key, text, hit in zip(keys, texts, found):
            vec = _load(hit)
            if vec is not None:
                self.reused += 1
                out.append(vec)
                continue
            vec = np.asarray(self._embed(text), dtype=np.float32)
            self.computed += 1
            fresh[key] = vec
            out.append(vec)
        if fresh and self._store is not None:
            try:
                with self._store.transact():
                    for key, vec in fresh.items():
                        self._store.set(key, _dump(vec))
            except Exception as exc:  # noqa: BLE001
                self._fail("write", exc)
        return out


def _no_pickle_disk() -> type:
    """A ``diskcache.Disk`` subclass (made on first use: diskcache is imported only then)."""
    import diskcache

    class NoPickleDisk(diskcache.Disk):
        """diskcache's storage that never unpickles: a pickled entry (none is written here;
        one put there by anything else) reads as None, a miss."""

        def fetch(self, mode, filename, value, read):  # noqa: ANN001 — diskcache's signature
            if mode == diskcache.core.MODE_PICKLE:
                return None
            return super().fetch(mode, filename, value, read)

    return NoPickleDisk


def _dump(vec: np.ndarray) -> bytes:
    """``vec`` in the ``.npy`` format (shape and dtype kept; bytes, so diskcache pickles nothing)."""
    buf = io.BytesIO()
    np.save(buf, vec, allow_pickle=False)
    return buf.getvalue()


def _load(raw: Any) -> np.ndarray | None:
    """A vector stored by :func:`_dump`, or None for a miss, damaged bytes or another type."""
    if not isinstance(raw, bytes):
        return None
    try:
        vec = np.load(io.BytesIO(raw), allow_pickle=False)
    except (ValueError, OSError, EOFError):
        return None
    return vec if vec.ndim >= 1 and vec.size else None
